// ringtrain status page: polls GET /api/status (docs/formats/status_api.md) and draws the ring,
// the job's progress chart, recoveries and checkpoints. No libraries; text goes in through
// textContent only. `?refresh=MS` sets the polling period (default 1000 ms).
'use strict';

const SVG_NS = 'http://www.w3.org/2000/svg';
const STATES = ['up', 'suspect', 'down', 'joining', 'draining'];
const refreshMs =
    Math.max(100, Number(new URLSearchParams(location.search).get('refresh')) || 1000);

function $(id) { return document.getElementById(id); }

function svg(name, attrs, parent) {
  const element = document.createElementNS(SVG_NS, name);
  for (const [key, value] of Object.entries(attrs || {})) element.setAttribute(key, value);
  if (parent) parent.appendChild(element);
  return element;
}

function text(id, value) { $(id).textContent = value; }

function isNumber(x) { return typeof x === 'number' && Number.isFinite(x); }

function fmt(x, digits) {
  if (!isNumber(x)) return '—';
  if (Math.abs(x) >= 1e6) return (x / 1e6).toFixed(2) + 'M';
  if (Math.abs(x) >= 1e4) return (x / 1e3).toFixed(1) + 'k';
  return x.toFixed(digits === undefined ? 2 : digits);
}

function bytes(n) {
  if (!isNumber(n)) return '—';
  const units = ['B', 'KiB', 'MiB', 'GiB', 'TiB'];
  let i = 0;
  while (n >= 1024 && i < units.length - 1) { n /= 1024; i++; }
  return n.toFixed(i ? 1 : 0) + ' ' + units[i];
}

function when(t) {
  if (!isNumber(t)) return '—';
  return new Date(t * 1000).toLocaleTimeString();
}

function stateClass(state) { return 'state-' + (STATES.includes(state) ? state : 'down'); }

function fillTable(id, rows) {
  const body = $(id).querySelector('tbody');
  body.replaceChildren();
  for (const cells of rows) {
    const tr = document.createElement('tr');
    for (const cell of cells) {
      const td = document.createElement('td');
      if (cell && typeof cell === 'object') {
        td.textContent = cell.text;
        if (cell.className) td.className = cell.className;
      } else {
        td.textContent = cell === undefined || cell === null ? '—' : String(cell);
      }
      tr.appendChild(td);
    }
    body.appendChild(tr);
  }
}

function drawRing(members) {
  const ring = $('ring');
  ring.replaceChildren();
  const cx = 150, cy = 150, r = 110;
  svg('circle', {cx, cy, r, class: 'ring-link'}, ring);
  if (!members.length) {
    svg('text', {x: cx, y: cy, class: 'empty'}, ring).textContent = 'no members';
    return;
  }
  members.forEach((member, i) => {
    const angle = -Math.PI / 2 + (2 * Math.PI * i) / members.length;
    const x = cx + r * Math.cos(angle), y = cy + r * Math.sin(angle);
    const node = svg('g', {class: 'ring-node', 'data-id': member.id}, ring);
    svg('circle', {cx: x, cy: y, r: 22, class: stateClass(member.state)}, node);
    svg('text', {x, y, class: 'node-label'}, node).textContent = String(member.id);
    svg('title', {}, node).textContent =
        'node ' + member.id + ' ' + (member.address || '') + ': ' + member.state;
  });
}

// The chart: loss on the left axis, tokens/s on the right, both over the step.
function drawChart(history) {
  const chart = $('chart');
  chart.replaceChildren();
  const width = 640, height = 300, left = 50, right = 60, top = 12, bottom = 30;
  const points = history.filter((p) => isNumber(p.step));
  if (!points.length) {
    svg('text', {x: width / 2, y: height / 2, class: 'empty'}, chart).textContent =
        'no progress yet';
    return;
  }
  const extent = (values) => {
    let lo = Math.min(...values), hi = Math.max(...values);
    if (lo === hi) { lo -= 1; hi += 1; }
    return [lo, hi];
  };
  const [s0, s1] = extent(points.map((p) => p.step));
  const sx = (s) => left + ((s - s0) / (s1 - s0)) * (width - left - right);
  const axisY = (lo, hi) => (v) => top + (1 - (v - lo) / (hi - lo)) * (height - top - bottom);
  svg('line', {x1: left, y1: height - bottom, x2: width - right, y2: height - bottom,
               class: 'axis'}, chart);
  for (const s of [s0, (s0 + s1) / 2, s1])
    svg('text', {x: sx(s), y: height - 10, class: 'tick', 'text-anchor': 'middle'}, chart)
        .textContent = String(Math.round(s));
  const series = [
    {key: 'loss', axisX: left, anchor: 'end', dx: -6},
    {key: 'tokens_per_second', axisX: width - right, anchor: 'start', dx: 6, css: 'tps'},
  ];
  for (const s of series) {
    const css = s.css || s.key;
    const valid = points.filter((p) => isNumber(p[s.key]));
    if (!valid.length) continue;
    const [lo, hi] = extent(valid.map((p) => p[s.key]));
    const sy = axisY(lo, hi);
    svg('line', {x1: s.axisX, y1: top, x2: s.axisX, y2: height - bottom, class: 'axis'}, chart);
    for (const v of [lo, (lo + hi) / 2, hi])
      svg('text', {x: s.axisX + s.dx, y: sy(v) + 4, class: 'tick', 'text-anchor': s.anchor},
          chart).textContent = fmt(v);
    const path = valid.map((p) => sx(p.step).toFixed(1) + ',' + sy(p[s.key]).toFixed(1));
    svg('polyline', {points: path.join(' '), class: 'line-' + css}, chart);
    for (const p of valid)
      svg('circle', {cx: sx(p.step), cy: sy(p[s.key]), r: 2.5, class: 'point-' + css}, chart);
  }
}

function render(status) {
  const node = status.node || {};
  text('node', 'node ' + (node.id ?? '—') + ' · ' + (node.address || '') +
       (node.version ? ' · v' + node.version : ''));
  const cluster = status.cluster || {};
  const members = Array.isArray(cluster.members) ? cluster.members.slice() : [];
  members.sort((a, b) => a.id - b.id);
  const up = members.filter((m) => m.state === 'up').length;
  text('generation', (cluster.generation ?? '—') + '.' + (cluster.epoch ?? 0));
  text('member-count', up + ' of ' + members.length + ' members up');
  drawRing(members);
  fillTable('members', members.map((m) => [
    m.id, m.address, {text: m.state, className: stateClass(m.state)},
    isNumber(m.workers) ? m.workers + ' / ' + (m.slots ?? '—') : '— / ' + (m.slots ?? '—'),
    Array.isArray(m.ranks) && m.ranks.length ? m.ranks.join(', ') : '—',
  ]));

  const job = status.job;
  if (job) {
    text('job-name', job.name || job.id || '—');
    text('job-state', job.state || '—');
    text('job-step', isNumber(job.step) ? String(job.step) : '—');
    text('job-progress', isNumber(job.max_steps) ? 'of ' + job.max_steps : '');
    text('job-loss', fmt(job.loss, 4));
    text('job-tps', fmt(job.tokens_per_second, 0));
    const l = job.layout || {};
    text('layout', isNumber(l.world) ? l.world + ' ranks' : '—');
    text('layout-detail', 'pp' + (l.pp ?? '—') + ' × dp' + (l.dp_replicate ?? '—') + '·' +
         (l.dp_shard ?? '—') + ' × tp' + (l.tp ?? '—') + ' · ZeRO-' + (l.zero ?? '—'));
    drawChart(Array.isArray(job.history) ? job.history : []);
  } else {
    for (const id of ['job-name', 'job-step', 'job-loss', 'job-tps', 'layout']) text(id, '—');
    text('job-state', 'no job');
    text('job-progress', '');
    text('layout-detail', '');
    drawChart([]);
  }

  fillTable('recoveries', (status.recoveries || []).map((r) => [
    when(r.time), r.cause, r.what,
    isNumber(r.detected_after_s) ? fmt(r.detected_after_s) + ' s' : '—',
    r.generation, r.layout, r.loaded_from, r.steps_lost,
    isNumber(r.recovery_s) ? fmt(r.recovery_s) + ' s' : 'recovering',
  ]));
  fillTable('checkpoints', (status.checkpoints || []).map((c) => [
    c.step, c.tier, c.uri, bytes(c.bytes), isNumber(c.save_s) ? fmt(c.save_s) + ' s' : '—',
    when(c.time),
  ]));
  document.body.dataset.updates = String(Number(document.body.dataset.updates || 0) + 1);
}

function showConnection(ok, message) {
  const badge = $('connection');
  badge.textContent = message;
  badge.className = 'badge ' + (ok ? 'ok' : 'error');
}

async function poll() {
  try {
    const response = await fetch('/api/status', {cache: 'no-store'});
    if (!response.ok) throw new Error('HTTP ' + response.status);
    render(await response.json());
    showConnection(true, 'live');
  } catch (error) {
    showConnection(false, 'daemon unreachable: ' + error.message);
  }
  setTimeout(poll, refreshMs);
}

poll();
