// SPDX-License-Identifier: MIT
//
// The size budget and the settings rule of docs/design/architecture.md,
// read from the tree (src, backends, netpolicy):
//   1. no source file over 1,000 lines;
//   2. no function over 120 lines (from the line of its opening brace to
//      the line of its closing one, as clang-format lays them out: both in
//      column 0);
//   3. no getenv() outside src/core/settings.c and src/shim (the shim is a
//      separate static program; everything else gets struct dm_config).
// What was over the budget before the check existed is listed in
// tests/docs/budget-allow.txt, each entry with its size then and a reason;
// an entry may shrink but never grow, and an entry that is within the
// budget again must be removed (the list only gets shorter). A failure
// names the file, the function and its size.
import { readdirSync, readFileSync, statSync } from "node:fs";
import { join, dirname } from "node:path";
import { fileURLToPath } from "node:url";
import { ok, done } from "./tap.mjs";

const top = process.env.top_srcdir || join(dirname(fileURLToPath(import.meta.url)), "..", "..");
const FILE_MAX = 1000;
const FUNC_MAX = 120;


function walk(dir) {
  const out = [];
  for (const name of readdirSync(join(top, dir)).sort()) {
    const rel = join(dir, name);
    if (statSync(join(top, rel)).isDirectory()) out.push(...walk(rel));
    else if (/\.[ch]$/.test(name)) out.push(rel);
  }
  return out;
}

// The allowlist: "file N reason", "file:function N reason" or
// "file:getenv N reason" (N: the calls it may keep), one a line;
// # starts a comment. N is the size the entry may not exceed.
const allow = new Map();
const allowBad = [];
readFileSync(join(top, "tests/docs/budget-allow.txt"), "utf8")
  .split("\n")
  .forEach((line, i) => {
    const t = line.trim();
    if (!t || t.startsWith("#")) return;
    const m = t.match(/^(\S+)\s+(\d+)\s+(\S.*)$/);
    if (!m) allowBad.push(`budget-allow.txt:${i + 1}: want "what size reason": '${t}'`);
    else allow.set(m[1], { max: Number(m[2]), reason: m[3], used: false });
  });
ok(allowBad.length === 0, "every allowlist entry has a size and a reason", allowBad);

// Functions: a line "{" in column 0 opens one, "}" in column 0 closes it;
// its name is the identifier before the first "(" of the lines above the
// brace, up to the previous blank line, comment end or closing brace.
function functions(text) {
  const lines = text.split("\n");
  const out = [];
  for (let i = 0; i < lines.length; i++) {
    if (lines[i] !== "{") continue;
    let j = i - 1;
    while (j > 0 && lines[j - 1] !== "" && !/^[}#]|\*\/\s*$/.test(lines[j - 1])) j--;
    const sig = lines.slice(j, i).join(" ");
    const name = (sig.match(/([A-Za-z_]\w*)\s*\(/) || [])[1];
    let k = i + 1;
    while (k < lines.length && !/^}/.test(lines[k])) k++;
    if (name && !/^(struct|union|enum)\b/.test(sig.trim()) && !/=\s*$/.test(sig)) out.push({ name, lines: k - i + 1 });
    i = k;
  }
  return out;
}

const files = ["src", "backends", "netpolicy"].flatMap(walk);
const bigFiles = [],
  bigFuncs = [],
  getenvs = [],
  grown = [];
const check = (key, size, max, list, what) => {
  if (size <= max) return;
  const a = allow.get(key);
  if (!a) list.push(`${what} (${size} lines, the budget is ${max})`);
  else {
    a.used = true;
    if (size > a.max) grown.push(`${what}: ${size} lines, more than the ${a.max} it was allowed (${a.reason})`);
  }
};
for (const f of files) {
  const text = readFileSync(join(top, f), "utf8");
  const count = text.split("\n").length - (text.endsWith("\n") ? 1 : 0);
  check(f, count, FILE_MAX, bigFiles, f);
  for (const fn of functions(text)) check(`${f}:${fn.name}`, fn.lines, FUNC_MAX, bigFuncs, `${f}: ${fn.name}()`);
  if (f === "src/core/settings.c" || f.startsWith("src/shim/")) continue;
  const code = text.replace(/\/\*[\s\S]*?\*\//g, (c) => c.replace(/[^\n]/g, " "));
  const calls = [];
  code.split("\n").forEach((line, i) => {
    for (const _ of line.matchAll(/\bgetenv\s*\(/g)) calls.push(`${f}:${i + 1}: ${line.trim()}`);
  });
  const a = allow.get(`${f}:getenv`);
  if (a && calls.length) {
    a.used = true;
    if (calls.length > a.max) grown.push(`${f}: ${calls.length} getenv() calls, more than the ${a.max} allowed`);
  } else getenvs.push(...calls);
}
ok(bigFiles.length === 0, `no new source file over ${FILE_MAX} lines (${files.length} files)`, bigFiles);
ok(bigFuncs.length === 0, `no new function over ${FUNC_MAX} lines`, bigFuncs);
ok(grown.length === 0, "no file or function on the allowlist grew", grown);
ok(getenvs.length === 0, "no getenv() outside src/core/settings.c and src/shim", getenvs);
const stale = [...allow].filter(([, a]) => !a.used).map(([k, a]) => `${k} (${a.reason})`);
ok(stale.length === 0, "every allowlist entry is still needed (remove those within the budget)", stale);

done();
