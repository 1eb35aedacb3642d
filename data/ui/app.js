// SPDX-License-Identifier: MIT
// The activity view: runs from GET /ui/api/v1/runs, kept live from the
// event stream. Everything from the API is inserted as text (textContent,
// never parsed as HTML): a command or file name is data, never markup.
'use strict';

const runs = new Map(); // id -> run, merged from the list and the events
const api = '/ui/api/v1';
const filters = {
  status: ['running', 'succeeded', 'failed', 'cancelled', 'timed_out', 'destroyed'],
  kind: ['run', 'job', 'agent', 'sandbox'],
};

function el(tag, text, cls) {
  const e = document.createElement(tag);
  if (text !== undefined && text !== null) e.textContent = String(text);
  if (cls) e.className = cls;
  return e;
}

function depth(run) {
  let d = 0;
  for (let p = run.parent_id; p && runs.has(p) && d < 16; p = runs.get(p).parent_id) d++;
  return d;
}

function duration(run) {
  if (!run.start_ms) return '';
  const end = run.end_ms || Date.now();
  return ((end - run.start_ms) / 1000).toFixed(1) + ' s';
}

// Cancel a running job, destroy a live persistent sandbox: the server that
// owns it does it (docs/reference/activity-api.md); asked once more first.
function action(r) {
  const op = r.status !== 'running' ? null : r.job_id ? 'cancel' : r.kind === 'sandbox' ? 'destroy' : null;
  const td = el('td');
  if (!op) return td;
  const b = el('button', op);
  b.type = 'button';
  b.addEventListener('click', async (e) => {
    e.stopPropagation();
    const what = op === 'cancel' ? `Cancel job ${r.job_id} and everything it started?` : `Destroy sandbox ${r.id}?`;
    if (!window.confirm(what)) return;
    b.disabled = true;
    const res = await fetch(`${api}/runs/${encodeURIComponent(r.id)}/${op}`, { method: 'POST' });
    const body = await res.json().catch(() => ({}));
    document.getElementById('notice').textContent = res.ok
      ? `${r.id}: ${body.status}` : `${r.id}: ${op} refused (${res.status}): ${body.error || ''}`;
    b.disabled = false;
  });
  td.append(b);
  return td;
}

// What went wrong, above the list: a failed load, a detail that did not open.
function problem(msg) {
  const p = document.getElementById('error');
  p.textContent = msg || '';
  p.hidden = !msg;
}

async function why(res) {
  const body = await res.json().catch(() => ({}));
  const hint = res.status === 401 ? ' (not signed in)' : '';
  return `${res.status}${body.error ? ': ' + body.error : ''}${hint}`;
}

// stdout and stderr of the run shown, polled once a second while it runs
// (GET runs/{id}/tail/{stream}?from=N, at most 64 KiB an answer); the page
// keeps the last LOG_KEEP characters of each.
const LOG_KEEP = 256 * 1024;
let tailing = null; // { id, timer, next: { stdout, stderr }, dec }

async function tailOnce(t) {
  for (const s of ['stdout', 'stderr']) {
    const from = t.next[s] === undefined ? '' : `?from=${t.next[s]}`;
    const res = await fetch(`${api}/runs/${encodeURIComponent(t.id)}/tail/${s}${from}`);
    if (tailing !== t) return;
    if (!res.ok) continue;
    const next = Number(res.headers.get('x-log-next'));
    const text = t.dec[s].decode(new Uint8Array(await res.arrayBuffer()), { stream: true });
    if (tailing !== t) return;
    const pre = document.getElementById(`detail-${s}`);
    const atEnd = pre.scrollTop + pre.clientHeight >= pre.scrollHeight - 4;
    if (text) pre.textContent = (pre.textContent + text).slice(-LOG_KEEP);
    if (atEnd) pre.scrollTop = pre.scrollHeight;
    t.next[s] = next;
  }
}

function tail(id) {
  if (tailing && tailing.id === id) return; // already followed (a detail shown anew)
  if (tailing) clearTimeout(tailing.timer);
  const t = { id, next: {}, dec: { stdout: new TextDecoder(), stderr: new TextDecoder() } };
  tailing = t;
  for (const s of ['stdout', 'stderr']) {
    document.getElementById(`detail-${s}`).textContent = '';
    document.getElementById(`detail-${s}-all`).href = `${api}/runs/${encodeURIComponent(id)}/files/${s}.log`;
  }
  const step = async () => {
    const running = runs.get(id)?.status === 'running';
    await tailOnce(t).catch(() => {});
    // One more look after the run ends, for what it printed last.
    if (tailing === t && running) t.timer = setTimeout(step, 1000);
  };
  step();
}

// The nested tree drawn as a tree: each run right below its parent (newest
// first among siblings, as the roots are), its depth as the indent. A run
// whose parent is not listed (filtered out, or not in the records) is a root.
function treeOrder(sorted) {
  const listed = new Set(sorted.map((r) => r.id));
  const children = new Map();
  const roots = [];
  for (const r of sorted) {
    if (r.parent_id && listed.has(r.parent_id) && r.parent_id !== r.id) {
      if (!children.has(r.parent_id)) children.set(r.parent_id, []);
      children.get(r.parent_id).push(r);
    } else {
      roots.push(r);
    }
  }
  const out = [];
  const seen = new Set();
  const walk = (r, d) => {
    if (seen.has(r.id) || d > 16) return;
    seen.add(r.id);
    out.push(r);
    for (const c of children.get(r.id) || []) walk(c, d + 1);
  };
  for (const r of roots) walk(r, 0);
  return out;
}

// One formatter for every row: toLocaleTimeString makes one per call, which
// is most of a 1,000-row list's time.
const clock = new Intl.DateTimeFormat(undefined, { hour: 'numeric', minute: '2-digit', second: '2-digit' });

function row(r) {
  const tr = el('tr', null, r.status || '');
  const id = el('td');
  const d = depth(r);
  id.style.paddingLeft = (0.5 + d * 1.5) + 'em';
  id.textContent = d ? `└ ${r.id}` : r.id;
  tr.dataset.id = r.id;
  tr.dataset.depth = d;
  if (r.parent_id) tr.dataset.parent = r.parent_id;
  tr.append(id, el('td', r.kind), el('td', r.status, 'status'), el('td', r.image), el('td', r.egress),
    el('td', r.principal), el('td', r.start_ms ? clock.format(r.start_ms) : ''),
    el('td', duration(r), 'duration'), el('td', r.exit_code), el('td', r.command, 'command'), action(r));
  return tr;
}

function rowsOf(list) {
  const frag = document.createDocumentFragment();
  for (const r of list) frag.append(row(r));
  return frag;
}

// The list drawn anew from runs (once a frame at most, however many events
// come); rows are built off the document and inserted at once. The first
// draw of a long list puts in the rows that fill the window, lets that frame
// paint, and adds the rest a frame later: 1,000 rows at once took most of the
// first paint's time. Later draws are whole, so a scrolled list stays put.
let drawn = 0; // render() calls; a later one drops an earlier one's rest
function render() {
  const status = document.getElementById('status').value;
  const kind = document.getElementById('kind').value;
  const body = document.querySelector('#runs tbody');
  const rows = treeOrder([...runs.values()]
    .filter((r) => (!status || r.status === status) && (!kind || r.kind === kind))
    .sort((a, b) => (b.start_ms || 0) - (a.start_ms || 0)));
  const draw = ++drawn;
  // A row is about 26 px high: this many fill any window, with some to spare.
  const first = Math.max(20, Math.ceil(window.innerHeight / 18));
  if (body.children.length >= first || rows.length <= first) {
    body.replaceChildren(rowsOf(rows));
    return;
  }
  body.replaceChildren(rowsOf(rows.slice(0, first)));
  requestAnimationFrame(() => setTimeout(() => { if (draw === drawn) body.append(rowsOf(rows.slice(first))); }, 0));
}

let pending = false;
function renderSoon() {
  if (pending) return;
  pending = true;
  requestAnimationFrame(() => { pending = false; render(); });
}

// Once a second: the running rows' durations, not the whole list.
function tick() {
  for (const tr of document.querySelectorAll('#runs tbody tr.running')) {
    const r = runs.get(tr.dataset.id);
    const td = r && tr.querySelector('td.duration');
    if (td) td.textContent = duration(r);
  }
}

async function show(id) {
  const res = await fetch(`${api}/runs/${encodeURIComponent(id)}`).catch(() => null);
  if (!res || !res.ok) {
    problem(`cannot open ${id}: ${res ? await why(res) : 'no answer from the server'}`);
    return;
  }
  problem('');
  const run = await res.json();
  tail(run.id);
  document.getElementById('detail').hidden = false;
  document.getElementById('detail-id').textContent = run.id;
  document.getElementById('detail-command').textContent = run.command || '';
  const rep = run.usage_report;
  document.getElementById('detail-cost').textContent = rep
    ? `cost $${rep.cost_usd} for ${rep.sandbox_count} run(s) in its tree; ${rep.usage.input_tokens} tokens in, ${rep.usage.output_tokens} out`
    : '';
  // Recorded by the server (its proxies, the vendor proxy's counts), never
  // read from the run's files.
  const u = run.usage || {};
  const figures = (x) => `${x.input_tokens} tokens in, ${x.output_tokens} out, $${x.cost_usd}`;
  document.getElementById('detail-usage').textContent = u.own
    ? `this run: ${figures(u.own)}; with the runs below it: ${figures(u.tree)}`
    : '';
  // The sandbox's open previews (sandbox_expose), while it lives. The link
  // has no code: a browser that opened the preview's URL once has its cookie.
  const previews = document.getElementById('detail-previews');
  previews.replaceChildren(el('span', 'previews: '));
  for (const v of run.status === 'running' ? run.previews || [] : []) {
    if (!/^http:\/\/[0-9.:]+\/$/.test(v.url)) continue;
    const a = el('a', `port ${v.port}: ${v.url}`);
    a.href = v.url;
    a.target = '_blank';
    a.rel = 'noopener noreferrer';
    previews.append(a, el('span', ' '));
  }
  previews.hidden = previews.children.length === 1;
  const egress = document.getElementById('detail-egress');
  const rows = egress.querySelector('tbody');
  rows.replaceChildren();
  for (const d of run.egress_decisions || []) {
    const tr = el('tr', undefined, d.decision === 'refused' ? 'refused' : undefined);
    for (const v of [d.host, d.port, d.decision, d.rule, d.count, d.bytes_up, d.bytes_down]) tr.append(el('td', v));
    rows.append(tr);
  }
  egress.hidden = rows.children.length === 0;
  const ul = document.getElementById('detail-files');
  ul.replaceChildren();
  for (const f of run.files || []) {
    const li = el('li');
    const a = el('a', f.name);
    a.href = `${api}/runs/${encodeURIComponent(run.id)}/files/${f.name.split('/').map(encodeURIComponent).join('/')}`;
    li.append(a, el('span', ` ${f.size} bytes`));
    preview(li, f, a.href);
    ul.append(li);
  }
}

// Inline previews of what the server serves inline (ui-api.c, inline_type):
// raster images as <img> (the page's CSP allows only its own origin), and
// the start of a text file as text. The logs are the tails above; HTML, SVG
// and everything else stay links, which download.
const PREVIEW_TEXT_MAX = 4096;
const PREVIEW_IMAGE_MAX = 8 << 20;
function preview(li, f, href) {
  if (/\.(png|jpe?g|gif|webp)$/i.test(f.name) && f.size <= PREVIEW_IMAGE_MAX) {
    const img = el('img');
    img.className = 'file-preview';
    img.alt = f.name;
    img.loading = 'lazy';
    img.src = href;
    li.append(el('br'), img);
  } else if (/\.txt$/i.test(f.name) && !/^(stdout|stderr)\.log$/.test(f.name)) {
    const pre = el('pre');
    pre.className = 'file-preview';
    li.append(pre);
    fetch(href).then((res) => (res.ok ? res.text() : '')).then((text) => {
      pre.textContent = text.length > PREVIEW_TEXT_MAX ? `${text.slice(0, PREVIEW_TEXT_MAX)}\n…` : text;
    }).catch(() => {});
  }
}

function merge(run, event) {
  // A "preview" event carries one change, not the list: the detail asks anew.
  if (event && 'previews' in run) {
    delete run.previews;
    if (document.getElementById('detail-id').textContent === run.id) show(run.id);
  }
  runs.set(run.id, Object.assign(runs.get(run.id) || {}, run));
}

async function start() {
  const live = document.getElementById('live');
  const events = new EventSource(`${api}/events`);
  events.addEventListener('run', (e) => {
    try { merge(JSON.parse(e.data), true); renderSoon(); } catch (err) { /* a bad line is skipped */ }
  });
  events.onopen = () => { live.textContent = 'live'; live.className = ''; };
  events.onerror = () => { live.textContent = 'reconnecting…'; live.className = 'off'; };
  document.querySelector('#runs tbody').addEventListener('click', (e) => {
    const tr = e.target.closest('tr');
    if (tr && tr.dataset.id) show(tr.dataset.id);
  });
  for (const [id, values] of Object.entries(filters)) {
    const select = document.getElementById(id);
    for (const v of values) select.append(el('option', v));
    select.addEventListener('change', render);
  }
  const res = await fetch(`${api}/runs`).catch(() => null);
  if (res && res.ok) for (const r of (await res.json()).runs) merge(r);
  else problem(`cannot list the runs: ${res ? await why(res) : 'no answer from the server'}`);
  render();
  setInterval(tick, 1000);
}

document.addEventListener('DOMContentLoaded', start);
