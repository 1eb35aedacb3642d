#!/usr/bin/env node
// SPDX-License-Identifier: MIT
//
// twee: compile Twee 3 to a playable Twine 2 HTML file with extwee and the
// story formats in $STORY_FORMATS_DIR (default /opt/story-formats, one
// folder NAME-VERSION/format.js per format), in the spirit of tweego:
//
//   twee [-f FORMAT] [-o OUT.html] INPUT.twee...   (output: stdout by default)
//   twee --list-formats
//
// FORMAT is a name, optionally with a version or version prefix: harlowe,
// Harlowe-3, snowman-2.0.0. Without -f the story's StoryData "format" and
// "format-version" choose, and failing those Harlowe. The story's format
// fields are set to the format used, so the HTML says what it runs.
import fs from 'node:fs';
import path from 'node:path';
import { parseTwee, parseStoryFormat, compileTwine2HTML } from 'extwee';

const DIR = process.env.STORY_FORMATS_DIR || '/opt/story-formats';
const USAGE = 'usage: twee [-f FORMAT] [-o OUT.html] INPUT.twee...\n       twee --list-formats\n';

function die(msg, code = 1) {
  process.stderr.write(`twee: ${msg}\n`);
  process.exit(code);
}

// [{ dir, name, version }] sorted by name, newest version first.
function formats() {
  let entries = [];
  try {
    entries = fs.readdirSync(DIR);
  } catch {
    die(`no story formats folder ${DIR}`);
  }
  return entries
    .map((dir) => {
      const m = /^(.+?)-(\d[\w.+-]*)$/.exec(dir);
      return m && fs.existsSync(path.join(DIR, dir, 'format.js')) ? { dir, name: m[1], version: m[2] } : null;
    })
    .filter(Boolean)
    .sort((a, b) => a.name.localeCompare(b.name) || b.version.localeCompare(a.version, undefined, { numeric: true }));
}

// With lenient (the story's own StoryData asks), a missing version falls
// back to the newest of the same major version, then of the same name.
function pick(name, version, lenient = false) {
  const all = formats();
  const named = all.filter((f) => f.name.toLowerCase() === name.toLowerCase());
  const matches = (v) => (f) => !v || f.version === v || f.version.startsWith(`${v}.`);
  let found = named.find(matches(version));
  if (!found && lenient && version) {
    found = named.find(matches(version.split('.')[0])) ?? named[0];
    if (found) process.stderr.write(`twee: ${name} ${version} is not installed, using ${found.version}\n`);
  }
  if (!found) {
    die(`no story format ${name}${version ? ` ${version}` : ''} in ${DIR} (have: ${all.map((f) => f.dir).join(', ') || 'none'})`);
  }
  return found;
}

const args = process.argv.slice(2);
let want = null;
let out = null;
const inputs = [];
for (let i = 0; i < args.length; i += 1) {
  const a = args[i];
  if (a === '-h' || a === '--help') {
    process.stdout.write(USAGE);
    process.exit(0);
  } else if (a === '--list-formats') {
    for (const f of formats()) process.stdout.write(`${f.dir}\t${path.join(DIR, f.dir, 'format.js')}\n`);
    process.exit(0);
  } else if (a === '-f' || a === '--format' || a === '-o' || a === '--output') {
    if (i + 1 >= args.length) die(`${a} needs a value`, 2);
    if (a.startsWith('-f') || a === '--format') want = args[++i];
    else out = args[++i];
  } else if (a.startsWith('-') && a !== '-') {
    die(`unknown option ${a}\n${USAGE}`, 2);
  } else {
    inputs.push(a);
  }
}
if (!inputs.length) die(`no input\n${USAGE}`, 2);

const text = inputs.map((f) => fs.readFileSync(f === '-' ? 0 : f, 'utf8')).join('\n');
let story;
try {
  story = parseTwee(text);
} catch (err) {
  die(`cannot parse ${inputs.join(' ')}: ${err.message}`);
}

let chosen;
if (want) {
  const m = /^(.+?)(?:-(\d[\w.+-]*))?$/.exec(want);
  chosen = pick(m[1], m[2]);
} else if (story.format) {
  chosen = pick(story.format, story.formatVersion || undefined, true);
} else {
  chosen = pick('harlowe');
}

const format = parseStoryFormat(fs.readFileSync(path.join(DIR, chosen.dir, 'format.js'), 'utf8'));
story.format = format.name;
story.formatVersion = format.version;
let html;
try {
  html = compileTwine2HTML(story, format);
} catch (err) {
  die(`cannot compile: ${err.message}`);
}
if (out) {
  fs.writeFileSync(out, html);
  process.stderr.write(`twee: ${out}: ${story.name}, ${story.size()} passages, ${format.name} ${format.version}\n`);
} else {
  process.stdout.write(html);
}
