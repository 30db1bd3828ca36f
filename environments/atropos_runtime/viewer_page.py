"""The viewer page's HTML, CSS and JavaScript (`environments.atropos_runtime.viewer` fills `%TITLE%` and `%DATA%`).

Plain JS, no libraries, no network. Contract: data is read with `JSON.parse` from the
`application/json` block and every piece of it reaches the DOM through `textContent` /
`createTextNode` (never `innerHTML`); control characters are shown as visible escapes. Colours come
from numbers only (`tint`: the reward scale), never from the data's text; a class name comes from
the data only through a fixed vocabulary (a tool result's flags: `flagWord`).
"""

PAGE = r"""<!doctype html>
<html lang="en"><head><meta charset="utf-8">
<meta http-equiv="Content-Security-Policy" content="default-src 'none'; style-src 'unsafe-inline'; script-src 'unsafe-inline'; img-src 'none'; connect-src 'none'; frame-src 'none'; form-action 'none'; base-uri 'none'">
<title>%TITLE%</title>
<style>
*{box-sizing:border-box}
html,body{height:100%;margin:0}
body{font:14px/1.4 system-ui,sans-serif;color:#1b1b1b;display:flex;flex-direction:column}
header{padding:.5em 1em;border-bottom:1px solid #ccc;background:#f7f7f9}
header h1{font-size:1.15em;margin:0 0 .2em}
.facts>span{display:inline-block;margin:.1em .8em .1em 0}
.facts b{font-weight:600}
.chip{display:inline-block;border-radius:9px;padding:0 .5em;margin:0 .2em .2em 0;background:#e8e8ee;font-size:.9em}
.toolbar{display:flex;flex-wrap:wrap;gap:.4em .8em;align-items:center;padding:.4em 1em;border-bottom:1px solid #ccc}
.toolbar input[type=number]{width:5em}
.toolbar input[type=search]{width:16em}
.tabs button{border:1px solid #bbb;background:#fff;padding:.2em .7em;border-radius:4px;cursor:pointer}
.tabs button.on{background:#2d5bd1;color:#fff;border-color:#2d5bd1}
main{flex:1;display:flex;min-height:0}
#list{width:42%;min-width:22em;overflow-y:auto;position:relative;border-right:1px solid #ccc}
#rows{position:relative}
.row{position:absolute;left:0;right:0;height:28px;line-height:28px;padding:0 .6em;white-space:nowrap;overflow:hidden;
  text-overflow:ellipsis;border-bottom:1px solid #eee;cursor:pointer;font-size:13px}
.row.sel{background:#dfe8ff}
.row .sc{display:inline-block;width:3.6em;font-weight:600}
.row .sc{text-align:center;border-radius:3px}
.row .st,.row .fr,.row .dr{display:inline-block;width:5.5em;overflow:hidden;text-overflow:ellipsis;vertical-align:top;color:#555}
.row .dr{width:8em;color:#8a3b00}
.unvs{background:repeating-linear-gradient(135deg,#ece4fb 0 4px,#d9ccf5 4px 8px);color:#5b3a99}
.runs{font-size:.9em;margin-top:.2em}.runs>div{margin:.1em 0}
.scale{display:inline-block;width:6em;height:.8em;vertical-align:middle;border-radius:2px;background:linear-gradient(90deg,hsl(0,65%,82%),hsl(60,65%,82%),hsl(120,65%,82%))}
table.tests{border-collapse:collapse;font-size:.9em;margin:.2em 0}
table.tests td,table.tests th{border-bottom:1px solid #eee;padding:.1em .7em .1em 0;text-align:left;vertical-align:top}
.o-passed{color:#17802a}.o-failed{color:#b3261e}.o-error,.o-timeout{color:#b26a00}.o-not_run{color:#888}
tr.first td{background:#fff1ef}
.pair{display:grid;grid-template-columns:1fr 1fr;gap:.2em 1em}
.pair .lbl{font-size:.85em;color:#555}
.toolbar select{max-width:12em}
.empty{padding:1em;color:#666}
#detail{flex:1;overflow-y:auto;padding:.6em 1.2em 3em}
#detail h2{font-size:1.1em;margin:.2em 0 .4em}
.pos{color:#17802a}.zero{color:#b3261e}.none{color:#b26a00}
.box{border:1px solid #ddd;border-radius:6px;margin:.6em 0;padding:.4em .7em;background:#fff}
.box>.lbl{font-size:.85em;color:#555;margin-bottom:.2em}
.assistant{border-left:5px solid #2d5bd1}
.env{border-left:5px solid #8a5cc4;background:#faf7ff}
.prompt{background:#f4f6fb}
.tool{border-left:5px solid #c77700;background:#fffaf0}
.call{border:1px dashed #9fb0e0;border-radius:4px;margin:.35em 0;padding:.2em .5em;background:#f6f8ff}
.call.bad{border:1px solid #c33;background:#fff1ef}
.flag{display:inline-block;border-radius:3px;padding:0 .4em;margin-left:.4em;font-size:.85em;background:#e8e8ee;color:#333}
.f-error,.f-malformed{background:#fbd5d2!important;color:#8c1d18!important}
.f-timeout,.f-refused{background:#ffe3b3!important;color:#7a4b00!important}
.tooluse{margin:.1em 0 .3em;color:#6b4400}
.row .tu{display:inline-block;min-width:3em;color:#9a5c00}.row .tu.bad{color:#b3261e;font-weight:600}
.reward{border-left:5px solid #999}
.box.reward{color:inherit}
.reward.pos{border-left-color:#2a2}.reward.zero{border-left-color:#c33}.reward.none{border-left-color:#e90}
pre{white-space:pre-wrap;word-break:break-word;margin:.2em 0;font:13px/1.4 ui-monospace,monospace}
.ctl{background:#ffe9a8;color:#7a4b00;border-radius:2px;font-size:.85em}
table.kv{border-collapse:collapse}
table.kv td{padding:.1em .8em .1em 0;vertical-align:top}
table.kv td:first-child{color:#555}
.sib{cursor:pointer;border:1px solid #ccc}
.sib.cur{border-color:#2d5bd1;background:#dfe8ff}
.toks{font:12px/1.9 ui-monospace,monospace}
.toks span{display:inline-block;white-space:pre;max-width:100%;overflow:hidden;text-overflow:ellipsis;vertical-align:top;line-height:1.5;padding:0 2px;margin:0 1px 2px 0;border-radius:2px}
.toks .p{background:#eee;color:#777}
button.more{margin-left:.5em;font-size:.85em}
.help{color:#666;font-size:.85em}
.note{color:#8a5a00}
</style></head>
<body>
<script type="application/json" id="rlvr-data">%DATA%</script>
<header><h1 id="title"></h1><div class="facts" id="facts"></div><div class="runs" id="runs"></div></header>
<div class="toolbar">
  <span class="tabs" id="tabs"></span>
  <label id="l-run">run <select id="f-run"></select></label>
  <label>status <select id="f-status"></select></label>
  <label>drop <select id="f-drop"></select></label>
  <label>finish <select id="f-finish"></select></label>
  <label id="l-tools">tools <select id="f-tools"><option value="">any</option><option value="used">used tools</option>
    <option value="errors">tool errors</option><option value="none">no tool calls</option></select></label>
  <label>reward <input id="f-min" type="number" step="any" placeholder="min"> to <input id="f-max" type="number" step="any" placeholder="max"></label>
  <input id="f-text" type="search" placeholder="search text, prompt, item, reason, drop, tool  ( / )">
  <label>sort <select id="f-sort">
    <option value="order">file order</option><option value="score-desc">reward, high first</option>
    <option value="score-asc">reward, low first</option><option value="ctok-desc">completion tokens, most first</option>
    <option value="len-desc">text length, longest first</option></select></label>
  <span id="count"></span>
  <span class="help">keys: j/k or &#8595;/&#8593; next/previous, PgDn/PgUp, Home/End, / search, t tokens, Esc leave a field</span>
</div>
<main><div id="list" tabindex="0"><div id="rows"></div></div><div id="detail"></div></main>
<script>
'use strict';
(function () {
const D = JSON.parse(document.getElementById('rlvr-data').textContent);
const G = D.groups, S = D.samples, ROW = 28;
const $ = (id) => document.getElementById(id);
const CTL = /[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f\u200b-\u200f\u2028\u2029\u202a-\u202e\u2066-\u2069\ufeff]/g;
const esc = (ch) => { const c = ch.charCodeAt(0); return c < 256 ? '\\x' + c.toString(16).padStart(2, '0') : '\\u' + c.toString(16).padStart(4, '0'); };
const str = (v) => v === null || v === undefined ? '' : (typeof v === 'string' ? v : JSON.stringify(v, null, 1));
const LIMIT = 20000;

// text into an element: never parsed as HTML; control characters as visible escapes; long text cut
function put(e, s, limit) {
  s = str(s); limit = limit || LIMIT;
  const shown = s.length > limit ? s.slice(0, limit) : s;
  let last = 0, m; CTL.lastIndex = 0;
  while ((m = CTL.exec(shown)) !== null) {
    if (m.index > last) e.appendChild(document.createTextNode(shown.slice(last, m.index)));
    const c = document.createElement('span'); c.className = 'ctl'; c.textContent = esc(m[0]); e.appendChild(c);
    last = m.index + 1;
  }
  if (last < shown.length) e.appendChild(document.createTextNode(shown.slice(last)));
  if (shown.length < s.length) {
    const b = document.createElement('button'); b.className = 'more';
    b.textContent = 'show all ' + s.length.toLocaleString() + ' characters';
    b.onclick = () => { e.textContent = ''; put(e, s, Infinity); };
    e.appendChild(b);
  }
  return e;
}
function el(tag, cls, text) { const e = document.createElement(tag); if (cls) e.className = cls; if (text !== undefined) put(e, text); return e; }
function oneLine(s) { s = str(s).slice(0, 300); return s.replace(/\n/g, ' \u23ce ').replace(CTL, esc); }
const cls = (v) => v === null || v === undefined || typeof v !== 'number' ? 'none' : (v > 0 ? 'pos' : 'zero');
// the reward colour scale: 0 red to 1 green (clipped to [0, 1]); no number (unverified) is striped ('unvs')
const tint = (v) => typeof v === 'number' && isFinite(v) ? 'hsl(' + Math.round(120 * Math.max(0, Math.min(1, v))) + ',65%,82%)' : '';
function paint(e, v) { const c = tint(v); if (c) e.style.background = c; else e.classList.add('unvs'); return e; }
const fmt = (v) => typeof v === 'number' ? (Number.isInteger(v) ? String(v) : v.toFixed(3)) : (v === null || v === undefined ? '—' : String(v));
const byGroup = new Map();
D.samples.forEach((x, k) => { if (!byGroup.has(x.g)) byGroup.set(x.g, []); byGroup.get(x.g).push(k); });
const VOCAB = D.vocab && Object.keys(D.vocab).length ? D.vocab : null;
// a token's text with its whitespace and control characters made visible
const visible = (p) => p.replace(/\n/g, '\u21b5').replace(/\t/g, '\u21e5').replace(/ /g, '\u00b7').replace(CTL, esc) || '\u2205';
const completion = (s) => s.turns.filter((t) => t.r === 'assistant').map((t) => t.c).join('\n');

// ---- run header
const H = D.header || {}, RUNS = D.runs && D.runs.length ? D.runs : [{name: '', env: H.env, model: H.model, settings: H.settings}];
const isKept = (s) => s.kind === 'kept' || s.kind === 'eval';
const kept = S.filter(isKept);
const rejected = S.filter((s) => !isKept(s));
const count = (xs, f) => { const c = {}; xs.forEach((x) => { const k = f(x); c[k] = (c[k] || 0) + 1; }); return c; };
$('title').textContent = document.title;
function fact(label, value, where) { const s = el('span'); const b = el('b', null, label + ': '); s.appendChild(b); put(s, value, 400); (where || $('facts')).append(s, ' '); }
// "key n · key n" of a count, most frequent first, at most 8 keys (each cut to 40 characters)
const counted = (c) => { const ks = Object.keys(c).sort((a, b) => c[b] - c[a] || (a < b ? -1 : 1)); return ks.slice(0, 8).map((k) => oneLine(k).slice(0, 40) + ' ' + c[k]).join(' · ') + (ks.length > 8 ? ' · +' + (ks.length - 8) + ' more' : ''); };
const groupsOf = (xs) => new Set(xs.map((s) => s.g)).size;
// kept, dropped and unverified samples of `xs` counted apart (a placeholder row of a failed group is no sample)
function tally(xs) {
  const k = xs.filter(isKept), d = xs.filter((s) => s.kind === 'dropped'), u = xs.filter((s) => s.kind === 'unverified');
  const sc = k.filter((s) => typeof s.score === 'number');
  const dropGroups = [...new Set(d.map((s) => s.g))];
  return {
    kept: k.length + ' samples in ' + groupsOf(k) + ' groups',
    mean: sc.length ? (sc.reduce((a, s) => a + s.score, 0) / sc.length).toFixed(3) : '—',
    dropped: d.length ? d.filter((s) => !s.ph).length + ' samples in ' + dropGroups.length + ' groups (' + counted(count(dropGroups, (g) => G[g].drop)) + ')' : 'none',
    unverified: u.length ? u.length + ' samples of ' + groupsOf(u) + ' kept groups (shown with their group)' : 'none',
  };
}
const settings = (st) => Object.keys(st || {}).map((k) => k + '=' + str(st[k])).join(' · ') || '—';
const evalLine = (m) => Object.keys(m).filter((k) => !k.includes('/status/')).map((k) => k.replace('eval/', '') + '=' + fmt(m[k])).join(' · ');
const all = tally(S);
if (RUNS.length === 1) { fact('env', RUNS[0].env || '—'); fact('model', RUNS[0].model || '—'); fact('settings', settings(RUNS[0].settings)); }
else fact('runs', String(RUNS.length));
fact('files', (D.sources || []).join(', '));
fact('kept', all.kept); fact('mean reward', all.mean); fact('dropped', all.dropped); fact('unverified', all.unverified);
fact('status', counted(count(S.filter((s) => !s.ph), (s) => s.status)));
fact('finish', counted(count(kept, (s) => s.finish)) || '—');
if (RUNS.length === 1 && RUNS[0].metrics) fact('eval', evalLine(RUNS[0].metrics));
const byRun = RUNS.map(() => []);
S.forEach((s) => { const r = G[s.g].run || 0; if (byRun[r]) byRun[r].push(s); });
if (RUNS.length > 1) RUNS.forEach((r, k) => {
  const line = el('div', 'run'); line.id = 'run-' + k; line.appendChild(el('b', null, 'run ' + r.name));
  const t = tally(byRun[k]); line.append(' ');
  [['env', r.env || '—'], ['model', r.model || '—'], ['settings', settings(r.settings)], ['kept', t.kept], ['mean reward', t.mean],
   ['dropped', t.dropped], ['unverified', t.unverified]].forEach(([a, b]) => fact(a, b, line));
  if (r.metrics) fact('eval', evalLine(r.metrics), line);
  $('runs').appendChild(line);
});
const legend = el('span'); legend.append('reward: 0 '); legend.appendChild(el('span', 'scale')); legend.append(' 1 · ');
legend.appendChild(el('span', 'chip unvs', 'unverified')); $('facts').append(legend, ' ');
(D.notes || []).forEach((n) => $('facts').appendChild(el('span', 'note', n)));

// ---- tool use: calls, errors (timeouts included), malformed calls (`tu`, viewer_tools.py)
const toolProblems = (u) => u ? (u.err || 0) + (u.bad || 0) : 0;
const FLAGW = {malformed: 'malformed', error: 'error', timeout: 'timed out', truncated: 'truncated', refused: 'not run: budget used up'};
const flagWord = (f) => Object.prototype.hasOwnProperty.call(FLAGW, f) ? FLAGW[f] : null;
function toolLine(u) {
  const names = Object.keys(u.names || {}).sort((a, b) => u.names[b] - u.names[a]);
  const parts = [u.calls + (u.calls === 1 ? ' call' : ' calls') + ' (' + names.slice(0, 6).map((n) => oneLine(n || '(no name)').slice(0, 40) + ' ' + u.names[n]).join(', ') + (names.length > 6 ? ', +' + (names.length - 6) + ' more' : '') + ')'];
  [['err', 'error', 'errors'], ['bad', 'malformed', 'malformed'], ['to', 'timed out', 'timed out'], ['cut', 'truncated', 'truncated'],
   ['ref', 'not run (budget used up)', 'not run (budget used up)'], ['un', 'unanswered', 'unanswered']].forEach(([k, one, many]) => { if (u[k]) parts.push(u[k] + ' ' + (u[k] === 1 ? one : many)); });
  if (typeof u.s === 'number') parts.push(u.s.toFixed(2) + ' s of tool time');
  return parts.join(' · ');
}
const toolUsers = S.filter((s) => s.tu);
if (toolUsers.length) {
  fact('tool use', toolUsers.length + ' of ' + S.filter((s) => !s.ph).length + ' samples made ' + toolUsers.reduce((a, s) => a + s.tu.calls, 0) + ' tool calls; ' + toolUsers.filter((s) => toolProblems(s.tu)).length + ' with tool errors or malformed calls');
}

// ---- sections and filters
const sections = [['samples', 'Samples', kept]];
if (rejected.length) sections.push(['rejected', 'Dropped & unverified', rejected]);
let section = kept.length || !rejected.length ? 'samples' : 'rejected';  // nothing kept: open on why
if (!kept.length && rejected.length) $('facts').appendChild(el('span', 'note', 'No samples were kept: ' + rejected.length + ' dropped or unverified (below).'));
sections.forEach(([key, label, xs]) => {
  const b = el('button', null, label + ' (' + xs.length + ')'); b.id = 'tab-' + key;
  b.onclick = () => { section = key; refilter(); };
  $('tabs').appendChild(b);
});
function options(id, values, label) {
  const sel = $(id); sel.appendChild(new Option('any', ''));
  [...new Set(values)].sort().forEach((v) => sel.appendChild(new Option(oneLine(label ? label(v) : v).slice(0, 80), v)));
}
options('f-status', S.map((s) => str(s.status)));
options('f-finish', S.map((s) => str(s.finish)));
options('f-drop', G.filter((g) => g.drop).map((g) => str(g.drop)));
options('f-run', RUNS.map((r, k) => String(k)), (k) => RUNS[k].name + ' (' + RUNS[k].env + ')');
if (RUNS.length < 2) $('l-run').style.display = 'none';
if (!rejected.length) $('f-drop').parentNode.style.display = 'none';
if (!toolUsers.length) $('l-tools').style.display = 'none';
const lower = new Array(S.length), promptText = new Array(G.length);
// search terms: `tool <name>` for every call (and its arguments), `tool error` for a sample with tool errors
const toolText = (s) => !s.tu ? '' : s.turns.map((t) => (t.calls || []).map((c) => 'tool ' + c.name + '\n' + c.a).join('\n')).join('\n') + (toolProblems(s.tu) ? '\ntool error' : '');
const seenText = (s) => Object.keys(s.seen || {}).map((k) => k + ' ' + s.seen[k]).join('\n') + (s.tests || []).map((t) => '\n' + t.join(' ')).join('');
function haystack(i) {
  if (lower[i] === undefined) {
    const s = S[i], g = G[s.g];
    if (promptText[s.g] === undefined) promptText[s.g] = g.prompt.map((m) => m.c).join('\n');
    lower[i] = [completion(s), s.turns.map((t) => t.c).join('\n'), s.reason, s.feedback, g.uid, str(g.item), str(g.answer),
      g.drop ? 'drop ' + g.drop : '', g.detail, promptText[s.g], seenText(s), toolText(s)].join('\n').toLowerCase();
  }
  return lower[i];
}
let V = [], sel = 0;
function refilter() {
  const tools = $('f-tools').value;
  const status = $('f-status').value, finish = $('f-finish').value, drop = $('f-drop').value, text = $('f-text').value.toLowerCase();
  const runAt = $('f-run').value === '' ? -1 : Number($('f-run').value);
  const lo = $('f-min').value === '' ? -Infinity : Number($('f-min').value);
  const hi = $('f-max').value === '' ? Infinity : Number($('f-max').value);
  const current = V[sel];
  V = [];
  for (let i = 0; i < S.length; i++) {
    const s = S[i], g = G[s.g];
    if ((section === 'samples') !== isKept(s)) continue;
    if (runAt >= 0 && (g.run || 0) !== runAt) continue;
    if (status && str(s.status) !== status) continue;
    if (finish && str(s.finish) !== finish) continue;
    if (tools && (tools === 'none' ? !!s.tu : !s.tu || (tools === 'errors' && !toolProblems(s.tu)))) continue;
    if (drop && str(g.drop) !== drop) continue;
    if (lo !== -Infinity || hi !== Infinity) { if (typeof s.score !== 'number' || s.score < lo || s.score > hi) continue; }
    if (text && !haystack(i).includes(text)) continue;
    V.push(i);
  }
  const by = $('f-sort').value;
  const num = (x) => typeof x === 'number' ? x : -Infinity;
  const key = {
    'score-desc': (i) => -num(S[i].score), 'score-asc': (i) => (typeof S[i].score === 'number' ? S[i].score : Infinity),
    'ctok-desc': (i) => -num(S[i].ctok), 'len-desc': (i) => -completion(S[i]).length,
  }[by];
  if (key) { const k = new Map(V.map((i) => [i, key(i)])); V.sort((a, b) => (k.get(a) - k.get(b)) || (a - b)); }
  sections.forEach(([k]) => $('tab-' + k).classList.toggle('on', k === section));
  const at = V.indexOf(current);
  sel = at >= 0 ? at : 0;
  $('count').textContent = V.length + ' shown';
  $('rows').style.height = (V.length * ROW) + 'px';
  drawList(); show(); reveal();
}
// a drop reason lives in the other section: choosing one goes there
$('f-drop').addEventListener('change', () => { if ($('f-drop').value && rejected.length) section = 'rejected'; });
['f-run', 'f-status', 'f-finish', 'f-tools', 'f-drop', 'f-sort'].forEach((id) => $(id).addEventListener('change', () => { refilter(); list.focus(); }));
['f-min', 'f-max', 'f-text'].forEach((id) => ['input', 'change'].forEach((ev) => $(id).addEventListener(ev, refilter)));

// ---- the virtualised list: only the rows in view (and a margin) exist
const list = $('list');
function drawList() {
  const rows = $('rows'); rows.textContent = '';
  if (!V.length) {
    const msg = section === 'samples' && !kept.length && rejected.length
      ? 'No samples were kept: ' + rejected.length + ' dropped or unverified (see the other tab).'
      : 'No samples match the filters.';
    rows.appendChild(el('div', 'empty', msg)); return;
  }
  const top = list.scrollTop, h = list.clientHeight || 600;
  const a = Math.max(0, Math.floor(top / ROW) - 10), b = Math.min(V.length, Math.ceil((top + h) / ROW) + 10);
  for (let p = a; p < b; p++) {
    const s = S[V[p]], g = G[s.g];
    const r = el('div', 'row' + (p === sel ? ' sel' : ''));
    r.style.top = (p * ROW) + 'px'; r.dataset.pos = p;
    r.appendChild(paint(el('span', 'sc ' + cls(s.score), fmt(s.score)), s.score)); r.appendChild(document.createTextNode(' '));
    r.appendChild(el('span', 'st', oneLine(s.status).slice(0, 40))); r.appendChild(document.createTextNode(' '));
    r.appendChild(el('span', 'fr', oneLine(s.finish || '').slice(0, 40)));
    if (s.tu) { const bad = toolProblems(s.tu); r.appendChild(document.createTextNode(' ')); r.appendChild(el('span', 'tu' + (bad ? ' bad' : ''), '\u2692' + s.tu.calls + (bad ? ' !' + bad : ''))); }
    if (section === 'rejected') { r.appendChild(document.createTextNode(' ')); r.appendChild(el('span', 'dr', oneLine(g.drop || '').slice(0, 40))); }
    r.appendChild(document.createTextNode(' #' + s.g + '.' + s.j + ' ' + oneLine(completion(s) || s.reason)));
    r.onclick = () => { go(p); list.focus(); };
    rows.appendChild(r);
  }
}
list.addEventListener('scroll', drawList);
window.addEventListener('resize', drawList);
function reveal() {
  const y = sel * ROW;
  if (y < list.scrollTop) list.scrollTop = y;
  else if (y + ROW > list.scrollTop + list.clientHeight) list.scrollTop = y + ROW - list.clientHeight;
}
function go(p) { if (!V.length) return; sel = Math.max(0, Math.min(V.length - 1, p)); reveal(); drawList(); show(); }

// ---- one sample
let tokensOpen = false;
function kv(rows) {
  const t = el('table', 'kv');
  rows.filter((r) => r[1] !== undefined && r[1] !== null && r[1] !== '').forEach(([k, v]) => {
    const tr = el('tr'); tr.appendChild(el('td', null, k)); tr.appendChild(el('td', null, typeof v === 'string' ? v : str(v))); t.appendChild(tr);
  });
  return t;
}
function box(kind, label, text) {
  const b = el('div', 'box ' + kind); b.appendChild(el('div', 'lbl', label));
  if (text !== undefined) b.appendChild(el('pre', null, text));
  return b;
}
function tokenView(tok) {
  const wrap = el('div', 'toks');
  const n = tok.ids.length, step = 4000;
  let done = 0;
  function more() {
    const end = Math.min(n, done + step);
    for (let i = done; i < end; i++) {
      const sampled = tok.m ? tok.m[i] === '1' : true, lp = tok.lp ? tok.lp[i] : null;
      const s = document.createElement('span');
      const piece = VOCAB ? VOCAB[tok.ids[i]] : undefined;
      s.textContent = piece === undefined ? String(tok.ids[i]) : visible(piece);
      if (!sampled) s.className = 'p';
      else if (typeof lp === 'number') { const p = Math.exp(lp); s.style.background = 'hsl(' + Math.round(120 * p) + ',70%,' + (88 - 8 * p) + '%)'; }
      s.title = 'position ' + i + ' · id ' + tok.ids[i] + (piece === undefined ? '' : ' · ' + JSON.stringify(piece)) + ' · ' + (sampled ? 'sampled (mask = id)' : 'not trained (mask -100)') + (sampled && typeof lp === 'number' ? ' · logprob ' + lp : '');
      wrap.appendChild(s);
    }
    done = end;
    if (done < n) { const b = el('button', 'more', 'show ' + Math.min(step, n - done) + ' more of ' + (n - done) + ' tokens'); b.onclick = () => { b.remove(); more(); }; wrap.appendChild(b); }
  }
  more();
  return wrap;
}
function show() {
  const d = $('detail'); d.textContent = ''; d.scrollTop = 0;
  if (!V.length) return;
  const i = V[sel], s = S[i], g = G[s.g];
  const h = el('h2'); h.appendChild(el('span', cls(s.score), 'reward ' + fmt(s.score)));
  h.appendChild(document.createTextNode(' · ' + str(s.status) + ' · group ' + s.g + ', sample ' + s.j + ' · '));
  put(h, g.uid); d.appendChild(h);
  if (s.tu) d.appendChild(el('div', 'tooluse', 'tool use: ' + toolLine(s.tu)));
  if (g.drop) d.appendChild(box('reward none', (g.drop === 'unverified' ? 'unverified sample' : 'dropped group: ' + g.drop) + ' (never written to the training output)', g.detail || s.reason));
  // the group's samples: a kept group's and its unverified ones (the `peer` record) together
  const mine = byGroup.get(s.g), peer = g.peer === null || g.peer === undefined ? [] : (byGroup.get(g.peer) || []);
  const siblings = (isKept(s) ? [...mine, ...peer] : [...peer, ...mine]).map((k) => [S[k], k]);
  if (siblings.length > 1) {
    const sb = el('div', 'lbl group'); sb.appendChild(document.createTextNode('group: '));
    siblings.forEach(([x, k]) => {
      const u = x.kind === 'unverified';
      const c = paint(el('span', 'chip sib ' + cls(x.score) + (u ? ' unv' : '') + (k === i ? ' cur' : ''), '#' + x.j + ' ' + (u ? 'unverified' : fmt(x.score))), x.score);
      c.onclick = () => jump(k);
      sb.appendChild(c);
    });
    if (peer.length) sb.appendChild(document.createTextNode(' (unverified samples are never written to the training output)'));
    d.appendChild(sb);
  }
  const rw = el('div', 'box reward ' + cls(s.score)); rw.appendChild(el('div', 'lbl', 'reward'));
  const p = g.params || {};
  rw.appendChild(kv([
    ['score', fmt(s.score)], ['status', str(s.status)], ['reason', s.reason], ['finish reason', s.finish],
    ['set_advantage_to_zero', s.adv0 ? 'true (truncated: no gradient from this sample)' : (s.kind === 'kept' ? 'false' : '')],
    ['prompt tokens', s.ptok], ['completion tokens', s.ctok], ['sequence tokens', s.len],
    ['episode stop', s.stop], ['turns', s.turns.filter((t) => t.r === 'assistant').length || ''],
    ['generation', Object.keys(p).map((k) => k + '=' + str(p[k])).join(' · ')], ['run', RUNS.length > 1 ? RUNS[g.run || 0].name : ''],
    ['source', g.src], ['item', g.item],
  ]));
  if (s.components && Object.keys(s.components).length) { rw.appendChild(el('div', 'lbl', 'components')); rw.appendChild(kv(Object.keys(s.components).map((k) => [k, fmt(s.components[k])]))); }
  if (s.feedback) { rw.appendChild(el('div', 'lbl', 'feedback')); rw.appendChild(el('pre', 'feedback', s.feedback)); }
  d.appendChild(rw);
  saw(d, s, g);
  const pr = el('details', 'box prompt'); pr.open = g.prompt.reduce((a, m) => a + m.c.length, 0) < 1500;
  pr.appendChild(el('summary', null, 'prompt (' + g.prompt.length + ' messages)'));
  g.prompt.forEach((m) => { pr.appendChild(el('div', 'lbl', m.role)); pr.appendChild(el('pre', null, m.c)); });
  d.appendChild(pr);
  s.turns.forEach((t) => {
    if (t.r === 'tool') { d.appendChild(toolBox(s, t)); return; }
    const label = t.r === 'assistant'
      ? 'assistant' + (t.k ? ' · turn ' + t.k : '') + (t.f ? ' · finish ' + t.f : '') + (t.n ? ' · ' + t.n + ' tokens' : '')
      : 'environment (' + t.role + ')' + (t.k ? ' · after turn ' + t.k : '');
    const b = box(t.r === 'assistant' ? 'assistant' : 'env', label, t.c);
    (t.calls || []).forEach((c, ci) => b.appendChild(callCard(s, c, ci)));
    const keys = Object.keys(t.info || {}), counts = keys.filter((k) => k.startsWith('tool_')), rest = keys.filter((k) => !k.startsWith('tool_'));
    // the tool layer's per-turn counts on one line (the non-zero ones, and calls), other info as a table
    if (counts.length) b.appendChild(el('div', 'lbl toolinfo', "this turn's tool counts: " + counts.filter((k) => k === 'tool_calls' || (t.info[k] !== 0 && t.info[k] !== null)).map((k) => k.slice(5) + ' ' + str(t.info[k])).join(' · ')));
    if (rest.length) b.appendChild(kv(rest.map((k) => ['info.' + k, str(t.info[k])])));
    d.appendChild(b);
  });
  if (!s.tok && !s.ph) d.appendChild(el('div', 'box note notok', 'no token view: ' + (s.tokwhy === 'budget'
    ? "the page's token budget was spent before this sample (rlvr view --tokens N raises it)"
    : (s.kind === 'eval' ? 'evaluate records no token ids' : (isKept(s) ? 'this group was written without token ids' : 'dropped and unverified samples carry no token ids')))));
  if (s.tok) {
    const tv = el('details', 'box tokens'); tv.id = 'tokens';
    tv.appendChild(el('summary', null, 'token view: ' + s.tok.ids.length + ' exact ' + (VOCAB ? 'tokens' : 'ids (no tokenizer: rlvr view --tokenizer PATH shows their text)') + ' (grey: prompt / environment, mask -100; coloured: sampled, green = high logprob, red = low)  ( t )'));
    tv.render = () => { if (tv.open && tv.children.length === 1) tv.appendChild(tokenView(s.tok)); };
    tv.addEventListener('toggle', () => { tokensOpen = tv.open; tv.render(); });
    tv.open = tokensOpen; tv.render();
    d.appendChild(tv);
  }
}
// one tool call of an assistant turn: name, arguments; a malformed one marked, with the error the model was sent
function callCard(s, c, ci) {
  const res = typeof c.res === 'number' ? s.turns[c.res] : null;
  const bad = c.bad || (res && (res.fl || []).includes('malformed'));
  const w = el('div', 'call' + (bad ? ' bad' : '')), h = el('div', 'lbl');
  h.append('tool call ' + (ci + 1) + ' · '); h.appendChild(el('b', 'tname', c.name || '(no name)'));
  if (c.id) h.appendChild(el('span', 'cid', ' · id ' + c.id));
  if (bad) h.appendChild(el('span', 'flag f-malformed', 'malformed' + (c.bad ? ': ' + c.bad : '')));
  w.appendChild(h); w.appendChild(el('pre', 'args', c.a));
  if (bad && res) { w.appendChild(el('div', 'lbl', 'error sent to the model')); w.appendChild(el('pre', 'senterr', res.c)); }
  if (!res) w.appendChild(el('div', 'help', 'no result: the episode stopped before this call was answered'));
  return w;
}
// a tool result: its call, time (when recorded) and flags, set apart from user / environment messages
function toolBox(s, t) {
  const b = el('div', 'box tool'), lbl = el('div', 'lbl'), of = t.at ? s.turns[t.at[0]] : null;
  lbl.append('tool result · '); lbl.appendChild(el('b', 'tname', t.name || '(no name)'));
  lbl.appendChild(el('span', null, of ? ' · call ' + (t.at[1] + 1) + (of.k ? ' of turn ' + of.k : '') : ' · no matching call'));
  if (t.id) lbl.appendChild(el('span', 'cid', ' · id ' + t.id));
  if (typeof t.s === 'number') lbl.appendChild(el('span', 'secs', ' · ' + t.s.toFixed(3) + ' s'));
  (t.fl || []).forEach((f) => { const w = flagWord(f); if (w) lbl.appendChild(el('span', 'flag f-' + f, w)); });
  b.appendChild(lbl); b.appendChild(el('pre', null, t.c));
  return b;
}
// what the rubric read: the extracted answer beside the gold, the judge's reply, the per-test table
function saw(d, s, g) {
  const seen = s.seen || {}, names = Object.keys(seen);
  const answerKey = names.find((k) => k === 'answer' || k.endsWith('.answer'));
  const hasGold = g.answer !== null && g.answer !== undefined;
  if (!names.length && !(s.tests || []).length) { if (hasGold) d.appendChild(box('gold', 'gold answer', str(g.answer))); return; }
  const b = el('div', 'box saw'); b.id = 'saw'; b.appendChild(el('div', 'lbl', 'what the rubric saw'));
  if (answerKey !== undefined) {
    const rule = seen[answerKey.replace(/answer$/, 'rule')];
    const pair = el('div', 'pair');
    pair.appendChild(el('div', 'lbl', 'extracted answer' + (rule ? ' (' + oneLine(rule).slice(0, 40) + ')' : '')));
    pair.appendChild(el('div', 'lbl', 'gold answer'));
    pair.appendChild(el('pre', 'extracted', seen[answerKey])); pair.appendChild(el('pre', 'gold', hasGold ? str(g.answer) : '—'));
    b.appendChild(pair);
  } else if (hasGold) { b.appendChild(el('div', 'lbl', 'gold answer')); b.appendChild(el('pre', 'gold', str(g.answer))); }
  names.filter((k) => k !== answerKey && !(answerKey && k === answerKey.replace(/answer$/, 'rule'))).forEach((k) => {
    b.appendChild(el('div', 'lbl', /(^|\.)reply( \d+)?$/.test(k) ? "judge's reply" + (k === 'reply' ? '' : ' (' + k + ')') : k));
    b.appendChild(el('pre', 'seen', seen[k]));
  });
  if ((s.tests || []).length) b.appendChild(testTable(s.tests));
  d.appendChild(b);
}
function testTable(tests) {
  const wrap = el('div'), c = count(tests, (t) => str(t[2]));
  const first = tests.findIndex((t) => t[2] !== 'passed');
  wrap.appendChild(el('div', 'lbl', tests.length + ' tests: ' + counted(c) + (first >= 0 ? ' · first failure: test ' + str(tests[first][0]) : '')));
  const t = el('table', 'tests'), hd = el('tr');
  ['test', 'kind', 'outcome', 'detail'].forEach((h) => hd.appendChild(el('th', null, h))); t.appendChild(hd);
  tests.slice(0, 500).forEach((x, k) => {
    const tr = el('tr', k === first ? 'first' : null);
    tr.appendChild(el('td', null, str(x[0]))); tr.appendChild(el('td', null, str(x[1])));
    tr.appendChild(el('td', 'o-' + String(x[2]).replace(/[^a-z_]/g, ''), str(x[2]))); tr.appendChild(el('td', null, str(x[3])));
    t.appendChild(tr);
  });
  wrap.appendChild(t);
  if (tests.length > 500) wrap.appendChild(el('div', 'help', (tests.length - 500) + ' more tests not listed'));
  return wrap;
}
function resetFilters() {
  ['f-run', 'f-status', 'f-finish', 'f-tools', 'f-drop', 'f-min', 'f-max', 'f-text'].forEach((id) => { $(id).value = ''; });
  refilter();
}
// select sample k: in its own section, clearing the filters when they hide it
function jump(k) {
  const want = isKept(S[k]) ? 'samples' : 'rejected';
  if (section !== want) { section = want; refilter(); }
  let p = V.indexOf(k); if (p < 0) { resetFilters(); p = V.indexOf(k); }
  go(p);
}

// ---- keyboard
document.addEventListener('keydown', (e) => {
  const t = e.target.tagName;
  if (t === 'INPUT' || t === 'SELECT' || t === 'TEXTAREA') { if (e.key === 'Escape') { e.preventDefault(); e.target.blur(); list.focus(); } return; }
  if (e.ctrlKey || e.metaKey || e.altKey) return;
  const page = Math.max(1, Math.floor(list.clientHeight / ROW) - 1);
  const moves = { ArrowDown: 1, j: 1, ArrowUp: -1, k: -1, PageDown: page, PageUp: -page };
  if (e.key in moves) go(sel + moves[e.key]);
  else if (e.key === 'Home') go(0);
  else if (e.key === 'End') go(V.length - 1);
  else if (e.key === '/') $('f-text').focus();
  else if (e.key === 't') { const tv = $('tokens'); if (tv) { tv.open = tokensOpen = !tv.open; tv.render(); } }
  else return;
  e.preventDefault();
});
refilter();
list.focus();
})();
</script></body></html>
"""
