// SPDX-License-Identifier: MIT
//
// The layers of docs/design/architecture.md (the shared design's ARCHITECTURE.md),
// read from the tree's own #include lines:
//   1. every folder is a layer, and a file includes only headers of its own
//      layer or of one below it, in the table's order (src/cli > src/tools >
//      src/mcp > src/core > src/shim > backends > netpolicy > src/basic), with
//      src/mcp and src/core apart: neither includes the other;
//   2. no include circle between modules (a module is X.c with X.h and its
//      X-internal.h), inside a layer or across;
//   3. the Makefile links one library per layer, in that order;
//   4. a header declares only functions defined in files of its own
//      component, in its own folder: for X.h or X-internal.h, X.c and X-*.c,
//      and the .c files the header's opening comment names after "defined
//      in" (curl.h: "defined in curl.c (...) and stream.c (...)"); a layer's
//      own header, named after its folder (backends/backend.h,
//      src/tools/tools.h, src/shim/shim.h), any file of the folder. A
//      declaration nothing defines fails too.
// A failure names the file and the include (or the function).
import { readdirSync, readFileSync, statSync } from "node:fs";
import { join, relative, dirname, basename } from "node:path";
import { fileURLToPath } from "node:url";
import { ok, done } from "./tap.mjs";

const top = process.env.top_srcdir || join(dirname(fileURLToPath(import.meta.url)), "..", "..");
const rank = {
  "src/basic": 0,
  netpolicy: 1, // the policy model (netpolicy/policy.h) is in a container spec
  backends: 2,
  "src/shim": 3,
  "src/core": 4,
  "src/mcp": 5, // beside core, not above it: see apart
  "src/tools": 6,
  "src/cli": 7,
};
// Pairs of layers that must not see each other although one ranks higher.
const apart = [["src/core", "src/mcp"]];


function walk(dir) {
  const out = [];
  for (const name of readdirSync(join(top, dir))) {
    const rel = join(dir, name);
    if (statSync(join(top, rel)).isDirectory()) out.push(...walk(rel));
    else if (/\.[ch]$/.test(name)) out.push(rel);
  }
  return out;
}
const layerOf = (file) => {
  const d = dirname(file);
  return Object.hasOwn(rank, d) ? d : null;
};

const files = ["src", "backends", "netpolicy"].flatMap(walk);
const includes = new Map(); // file -> [header without .h]
for (const f of files) {
  const text = readFileSync(join(top, f), "utf8");
  includes.set(f, [...text.matchAll(/^#include "([^"]+)\.h"/gm)].map((m) => m[1]).filter((h) => h !== "config"));
}

// 1: every file sits in a layer, and looks only down (or sideways
// within its own folder).
const stray = files.filter((f) => !layerOf(f));
ok(stray.length === 0, "every source file lives in a layer's folder", stray);
const up = [];
for (const [f, incs] of includes) {
  const lf = layerOf(f);
  if (!lf) continue;
  for (const h of incs) {
    const lh = layerOf(h + ".h");
    if (!lh) {
      up.push(`${f}: includes "${h}.h", which is in no layer`);
      continue;
    }
    if (lh === lf) continue;
    const isApart = apart.some(([a, b]) => (a === lf && b === lh) || (a === lh && b === lf));
    if (isApart || rank[lh] >= rank[lf]) up.push(`${f}: includes "${h}.h" (${lh} is not below ${lf})`);
  }
}
ok(up.length === 0, `no file includes a header of its own layer's level or above (${files.length} files)`, up);

// 2: strongly connected components of the module graph (Tarjan).
const mod = (p) => p.replace(/\.[ch]$/, "").replace(/-internal$/, "");
const graph = new Map();
for (const [f, incs] of includes) {
  const m = mod(f);
  if (!graph.has(m)) graph.set(m, new Set());
  for (const h of incs) if (mod(h) !== m) graph.get(m).add(mod(h));
}
let index = 0;
const idx = new Map(),
  low = new Map(),
  stack = [],
  on = new Set(),
  circles = [];
function strong(v) {
  idx.set(v, index);
  low.set(v, index++);
  stack.push(v);
  on.add(v);
  for (const w of graph.get(v) || []) {
    if (!idx.has(w)) {
      strong(w);
      low.set(v, Math.min(low.get(v), low.get(w)));
    } else if (on.has(w)) low.set(v, Math.min(low.get(v), idx.get(w)));
  }
  if (low.get(v) === idx.get(v)) {
    const c = [];
    let w;
    do {
      w = stack.pop();
      on.delete(w);
      c.push(w);
    } while (w !== v);
    if (c.length > 1) circles.push(c.sort().join(" <-> "));
  }
}
for (const v of graph.keys()) if (!idx.has(v)) strong(v);
ok(circles.length === 0, `no include circle between modules (${graph.size} modules)`, circles);

// 3: the link order of the libraries.
const am = readFileSync(join(top, "Makefile.am"), "utf8");
const m = am.match(/^DM_LIBS = ((?:.*\\\n)*.*)$/m);
const libs = m ? m[1].replace(/\\\n/g, " ").trim().split(/\s+/) : [];
const order = libs.map((l) => rank[dirname(l)]);
const want = ["src/tools", "src/mcp", "src/core", "src/shim", "backends", "netpolicy", "src/basic"];
ok(
  libs.length === want.length && libs.every((l, i) => dirname(l) === want[i]),
  "DM_LIBS links one library per layer, the highest first",
  [`DM_LIBS = ${libs.join(" ")}`, `want the folders ${want.join(" ")}`],
);
ok(
  order.every((r, i) => i === 0 || r <= order[i - 1]),
  "no library in DM_LIBS comes before one above it",
  libs.map((l, i) => `${l}: ${order[i]}`),
);

// 4: where the functions a header declares are defined. Read without a
// compiler: comments and literals blanked, preprocessor lines dropped.
const blank = (t) =>
  t
    .replace(/\/\*[\s\S]*?\*\/|\/\/[^\n]*|"(?:[^"\\\n]|\\.)*"|'(?:[^'\\\n]|\\.)*'/g, (x) =>
      x[0] === "/" ? x.replace(/[^\n]/g, " ") : x[0] + x[0],
    )
    .replace(/^[ \t]*#(?:.*\\\n)*.*$/gm, " ")
    .replace(/__attribute__\s*\(\((?:[^()]|\([^()]*\))*\)\)/g, " ");
// The functions a header declares at file scope (not typedefs, not
// function pointers, not static inline ones it defines itself).
function declared(text) {
  const t = blank(text);
  const names = [];
  let depth = 0,
    stmt = "";
  for (let i = 0; i < t.length; i++) {
    const c = t[i];
    if (c === "{" && depth === 0 && /\)\s*$/.test(stmt)) {
      for (let d = 1; d && ++i < t.length; ) d += t[i] === "{" ? 1 : t[i] === "}" ? -1 : 0;
      stmt = "";
    } else if (c === "{") depth++;
    else if (c === "}") depth--;
    else if (c === ";" && depth === 0) {
      const s = stmt.trim();
      stmt = "";
      const m = s.match(/\b([A-Za-z_]\w*)\s*\(/);
      if (m && !/^typedef\b/.test(s) && !/^\s*\*/.test(s.slice(m.index + m[0].length))) names.push(m[1]);
    } else if (depth === 0) stmt += c;
  }
  return names;
}
const definedIn = new Map(); // function -> Set of .c files
for (const f of files.filter((f) => f.endsWith(".c"))) {
  const t = blank(readFileSync(join(top, f), "utf8"));
  for (const m of t.matchAll(/\b([A-Za-z_]\w*)\s*\(/g)) {
    let i = m.index + m[0].length;
    for (let d = 1; d && i < t.length; i++) d += t[i] === "(" ? 1 : t[i] === ")" ? -1 : 0;
    if (!/^\s*\{/.test(t.slice(i, i + 64))) continue;
    if (!definedIn.has(m[1])) definedIn.set(m[1], new Set());
    definedIn.get(m[1]).add(f);
  }
}
const anchor = declared(readFileSync(join(top, "backends/curl.h"), "utf8"));
ok(
  anchor.includes("dm_curl_request") && (definedIn.get("dm_curl_request") || new Set()).has("backends/curl.c"),
  "the reader finds dm_curl_request declared in curl.h and defined in curl.c",
  [`curl.h declares: ${anchor.join(" ")}`],
);
const misplaced = [];
let nDecl = 0;
for (const h of files.filter((f) => f.endsWith(".h"))) {
  const text = readFileSync(join(top, h), "utf8");
  const dir = dirname(h);
  const stem = basename(h, ".h").replace(/-internal$/, "");
  const own = stem === basename(dir) || `${stem}s` === basename(dir);
  const opening = (text.match(/\/\*[\s\S]*?\*\//g) || []).find((c) => !/SPDX-License-Identifier/.test(c)) || "";
  const named = new Set();
  for (const m of opening.matchAll(/defined in ((?:[^.]|\.(?!\s))*)/gi))
    for (const n of m[1].matchAll(/([\w-]+)\.c\b/g)) named.add(n[1] + ".c");
  const mine = (f) =>
    dirname(f) === dir &&
    (own || basename(f, ".c") === stem || basename(f).startsWith(`${stem}-`) || named.has(basename(f)));
  for (const fn of declared(text)) {
    nDecl++;
    const where = [...(definedIn.get(fn) || [])];
    if (where.length === 0) misplaced.push(`${h}: declares ${fn}, which no .c file defines`);
    else if (!where.some(mine)) misplaced.push(`${h}: declares ${fn}, defined in ${where.join(", ")}`);
  }
}
ok(
  misplaced.length === 0,
  `every function a header declares is defined in its own component (${nDecl} declarations)`,
  misplaced,
);

done();
