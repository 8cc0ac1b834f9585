// tierdb dashboard: hand-written, no dependencies, no build step. Served by `tierdb serve`
// (src/server/dashboard.rs) and talking only to the same server's HTTP API.
//
// DOM contract (tests rely on it):
//   #resolution  one <option> per configured tier, finest first (value = tier name)
//   #range       ranges for the chosen tier (value = span sent as from=-VALUE, data-seconds)
//   #display     per_sec (avg/sec), total, avg, max, min, count
//   #series-search, #series-list > li.series-item[data-series=<canonical name>] (.selected)
//   #charts > svg.chart[data-series][data-points][data-tier][data-window="FROM..TO"][data-display]
//       data-points: non-null points drawn; data-window: unix seconds of the window shown
//   #status: #stat-rate, #stat-series, #stat-rejected, #stat-disk-total (data-value = raw
//       number), #stat-disk rows tr[data-tier] (data-bytes)
//   #error: visible (not [hidden]) while an API call fails
//
// Auth: a token in the page address (?token=T) is sent as `Authorization: Bearer T`.
'use strict';

(function () {
  const SVGNS = 'http://www.w3.org/2000/svg';
  const REFRESH_MS = 5000;
  const SERIES_REFRESH_MS = 30000;
  const DEFAULT_SELECTED = 3;
  const MAX_LISTED = 300;
  // Ranges offered for a tier of resolution r: from MIN_BUCKETS*r to MAX_BUCKETS*r (the
  // engine's default auto-tier point budget), never past the tier's retention.
  const MIN_BUCKETS = 24;
  const MAX_BUCKETS = 1500;
  const HOUR = 3600;
  const DAY = 86400;
  // [label, seconds]; the value sent is the seconds in the largest whole unit.
  const RANGE_LADDER = [
    ['1m', 60], ['5m', 300], ['15m', 900], ['1h', HOUR], ['6h', 6 * HOUR], ['12h', 12 * HOUR],
    ['24h', DAY], ['2d', 2 * DAY], ['5d', 5 * DAY], ['1w', 7 * DAY], ['2w', 14 * DAY],
    ['1mo', 30 * DAY], ['2mo', 60 * DAY], ['6mo', 180 * DAY], ['1y', 365 * DAY],
    ['2y', 730 * DAY], ['5y', 1825 * DAY], ['10y', 3650 * DAY],
  ];
  const DISPLAY_UNIT = { per_sec: '/s', count: ' samples' };
  const PALETTE = 8;

  const $ = (id) => document.getElementById(id);
  const el = {
    resolution: $('resolution'),
    range: $('range'),
    display: $('display'),
    search: $('series-search'),
    seriesList: $('series-list'),
    seriesInfo: $('series-info'),
    seriesClear: $('series-clear'),
    charts: $('charts'),
    error: $('error'),
    updated: $('updated'),
    tooltip: $('tooltip'),
    rate: $('stat-rate'),
    seriesCount: $('stat-series'),
    rejected: $('stat-rejected'),
    diskTotal: $('stat-disk-total'),
    disk: $('stat-disk'),
  };

  const token = new URLSearchParams(location.search).get('token') || '';

  const state = {
    tiers: [], // {name, res, retention, windowStart, bytes, files}, finest first
    series: [], // canonical names for the current server-side glob, sorted
    seriesGlob: null,
    seriesLoadedAt: 0,
    seriesError: null,
    seriesTotal: null, // tierdb_series at the last /metrics read
    seriesTotalListed: undefined, // ... when the list was last read
    selected: [], // canonical names, in selection order
    userTouched: false, // once the user picks series, empty stays empty
    charts: new Map(), // name -> {svg, data, error, request}
    prevAccepted: null, // {value, at} from the previous /metrics read
    gen: 0, // bumped on every control change; older answers are dropped
    wanted: readHash(),
  };

  // ---------------------------------------------------------------- API

  class ApiError extends Error {
    constructor(status, message, path) {
      super(message);
      this.status = status;
      this.path = path;
    }
    where() {
      return '/' + this.path.split('?')[0];
    }
    what() {
      return this.status ? `${this.status} ${this.message}` : this.message;
    }
    describe() {
      return `GET ${this.where()}: ${this.what()}`;
    }
  }

  async function api(path, asText) {
    const headers = {};
    if (token) headers.Authorization = 'Bearer ' + token;
    let res;
    try {
      res = await fetch(path, { headers, cache: 'no-store' });
    } catch (e) {
      throw new ApiError(0, 'cannot reach the server (' + e.message + ')', path);
    }
    const text = await res.text();
    if (!res.ok) {
      let message = text.trim() || res.statusText;
      try {
        const body = JSON.parse(text);
        if (body && body.error) message = body.error;
      } catch (_) { /* not JSON: keep the text */ }
      if (res.status === 401) {
        message += token
          ? ' (the token in this page\'s address, ?token=…, was refused)'
          : ' (this server has a token: open this page as /?token=<token>)';
      }
      throw new ApiError(res.status, message, path);
    }
    if (asText) return text;
    try {
      return JSON.parse(text);
    } catch (e) {
      throw new ApiError(res.status, 'answer is not JSON: ' + e.message, path);
    }
  }

  // One line per distinct failure, naming every path that failed that way.
  function showErrors(errors) {
    const byWhat = new Map();
    for (const e of errors) {
      const what = e instanceof ApiError ? e.what() : String(e);
      if (!byWhat.has(what)) byWhat.set(what, []);
      if (e instanceof ApiError && !byWhat.get(what).includes(e.where())) byWhat.get(what).push(e.where());
    }
    const lines = [...byWhat].map(([what, paths]) => (paths.length ? `GET ${paths.join(', ')}: ${what}` : what));
    el.error.textContent = '';
    for (const line of lines) {
      const p = document.createElement('p');
      p.textContent = line;
      el.error.appendChild(p);
    }
    el.error.hidden = lines.length === 0;
  }

  // ---------------------------------------------------------------- spans and formats

  function spanSecs(text) {
    const m = /^(\d+)([smhdw])$/.exec(String(text).trim());
    if (!m) return NaN;
    return Number(m[1]) * { s: 1, m: 60, h: HOUR, d: DAY, w: 7 * DAY }[m[2]];
  }

  function spanText(secs) {
    for (const [unit, size] of [['d', DAY], ['h', HOUR], ['m', 60]]) {
      if (secs % size === 0) return secs / size + unit;
    }
    return secs + 's';
  }

  function pad2(n) {
    return String(n).padStart(2, '0');
  }

  const MONTHS = ['Jan', 'Feb', 'Mar', 'Apr', 'May', 'Jun', 'Jul', 'Aug', 'Sep', 'Oct', 'Nov', 'Dec'];
  const WEEKDAYS = ['Sun', 'Mon', 'Tue', 'Wed', 'Thu', 'Fri', 'Sat'];

  function hhmm(d) {
    return pad2(d.getHours()) + ':' + pad2(d.getMinutes());
  }

  function dayLabel(d) {
    return MONTHS[d.getMonth()] + ' ' + d.getDate();
  }

  // A moment in local time, as precise as the resolution needs.
  function fmtMoment(ts, res, withWeekday) {
    const d = new Date(ts * 1000);
    const day = (withWeekday ? WEEKDAYS[d.getDay()] + ' ' : '') + dayLabel(d);
    if (res >= DAY) return day + ' ' + d.getFullYear();
    return day + ', ' + hhmm(d);
  }

  function fmtWindow(from, to, res) {
    const a = new Date(from * 1000);
    const b = new Date(to * 1000);
    if (res < DAY && a.toDateString() === b.toDateString()) {
      return dayLabel(a) + ', ' + hhmm(a) + ' – ' + hhmm(b);
    }
    return fmtMoment(from, res) + ' – ' + fmtMoment(to, res);
  }

  function fmtBytes(n) {
    const units = ['B', 'KiB', 'MiB', 'GiB', 'TiB', 'PiB'];
    let i = 0;
    while (n >= 1024 && i < units.length - 1) {
      n /= 1024;
      i += 1;
    }
    return (i === 0 ? String(n) : n.toFixed(n < 10 ? 2 : n < 100 ? 1 : 0)) + ' ' + units[i];
  }

  function fmtCount(n) {
    return Math.round(n).toLocaleString('en-US');
  }

  function fmtValue(v) {
    if (v === 0) return '0';
    const a = Math.abs(v);
    if (a >= 1e15 || a < 1e-4) return v.toExponential(3);
    return v.toLocaleString('en-US', { maximumSignificantDigits: 6 });
  }

  function fmtRate(r) {
    if (r >= 1e6) return (r / 1e6).toFixed(2) + ' M';
    if (r >= 1e4) return (r / 1e3).toFixed(1) + ' k';
    return r.toFixed(r < 10 ? 2 : 1);
  }

  // [scale, suffix, smallest top value that uses it]: plain numbers up to 9999.
  const SI = [[1e12, 'T', 1e12], [1e9, 'G', 1e9], [1e6, 'M', 1e6], [1e3, 'k', 1e4]];

  // Tick labels share one scale and the decimals their step needs.
  function tickFormatter(lo, hi, step) {
    const top = Math.max(Math.abs(lo), Math.abs(hi));
    let scale = 1;
    let suffix = '';
    for (const [s, name, from] of SI) {
      if (top >= from) {
        scale = s;
        suffix = name;
        break;
      }
    }
    // The fewest decimals that write every multiple of the step exactly (2.5 needs one).
    let decimals = 0;
    const unit = step / scale;
    while (decimals < 10 && Math.abs(unit * 10 ** decimals - Math.round(unit * 10 ** decimals)) > 1e-6 * 10 ** decimals) {
      decimals += 1;
    }
    return (v) => {
      const x = v / scale;
      return Math.abs(x) < step / scale / 2 ? '0' : x.toFixed(decimals) + suffix;
    };
  }

  // ---------------------------------------------------------------- URL hash (view state)

  function readHash() {
    const p = new URLSearchParams(location.hash.replace(/^#/, ''));
    return {
      tier: p.get('tier'),
      range: p.get('range'),
      display: p.get('display'),
      series: p.getAll('s'),
      search: p.get('q'),
    };
  }

  function writeHash() {
    const p = new URLSearchParams();
    if (el.resolution.value) p.set('tier', el.resolution.value);
    if (el.range.value) p.set('range', el.range.value);
    p.set('display', el.display.value);
    if (el.search.value) p.set('q', el.search.value);
    for (const s of state.selected) p.append('s', s);
    history.replaceState(null, '', location.pathname + location.search + '#' + p.toString());
  }

  // ---------------------------------------------------------------- tiers, resolution, range

  function rangesFor(tier) {
    const lo = MIN_BUCKETS * tier.res;
    const hi = Math.min(MAX_BUCKETS * tier.res, tier.retention);
    let out = RANGE_LADDER.filter(([, secs]) => secs >= lo && secs <= hi);
    if (out.length === 0) {
      // A tier too short for the ladder: offer what it holds.
      const secs = Math.max(tier.res, Math.min(MAX_BUCKETS * tier.res, tier.retention));
      out = [[spanText(secs), secs]];
    }
    const anyUnderADay = out.some(([, secs]) => secs < DAY);
    return out.map(([text, secs]) => {
      const label = secs === DAY && !anyUnderADay ? '1d' : text;
      // The value is what the server parses: the label itself when it is a span ("24h",
      // "1w"), else whole days ("1mo" is "30d").
      return { label, secs, value: /^\d+[smhdw]$/.test(label) ? label : spanText(secs) };
    });
  }

  function fillSelect(select, options, wanted) {
    const previous = select.value;
    select.textContent = '';
    for (const o of options) {
      const opt = document.createElement('option');
      opt.value = o.value;
      opt.textContent = o.label;
      if (o.title) opt.title = o.title;
      if (o.secs) opt.dataset.seconds = String(o.secs);
      select.appendChild(opt);
    }
    const values = options.map((o) => o.value);
    if (wanted && values.includes(wanted)) select.value = wanted;
    else if (values.includes(previous)) select.value = previous;
    else if (options.length) select.value = options[0].value;
  }

  // The first series of each distinct name (cpu.user, http.requests, ...) up to `n`, so a
  // fresh page shows different metrics rather than one metric of several hosts.
  function firstOfEachName(series, n) {
    const seen = new Set();
    const picked = [];
    for (const name of series) {
      const base = name.split('{')[0];
      if (!seen.has(base)) {
        seen.add(base);
        picked.push(name);
        if (picked.length === n) return picked;
      }
    }
    for (const name of series) {
      if (picked.length === n) break;
      if (!picked.includes(name)) picked.push(name);
    }
    return picked;
  }

  function currentTier() {
    return state.tiers.find((t) => t.name === el.resolution.value) || state.tiers[0];
  }

  function fillRanges(wanted) {
    const tier = currentTier();
    if (!tier) return;
    const options = rangesFor(tier);
    const prevSecs = Number((el.range.selectedOptions[0] || {}).dataset?.seconds || 0);
    fillSelect(el.range, options, wanted);
    if (!wanted && prevSecs) {
      // Keep the range shown before, matched by its length (one tier labels a day "24h",
      // another "1d"), or else the closest one in ratio.
      let best = options[0];
      for (const o of options) {
        if (Math.abs(Math.log(o.secs / prevSecs)) < Math.abs(Math.log(best.secs / prevSecs))) best = o;
      }
      el.range.value = best.value;
    }
  }

  async function loadTiers() {
    const body = await api('api/v1/tiers');
    // The raw tier (kind "raw", no resolution) is not offered here yet: its points are not
    // on a bucket grid, which this chart draws.
    const tiers = (body.tiers || []).filter((t) => t.kind !== 'raw').map((t) => ({
      name: t.name,
      res: spanSecs(t.resolution),
      retention: spanSecs(t.retention),
      windowStart: t.window_start,
      bytes: t.disk ? t.disk.bytes : 0,
      files: t.disk ? t.disk.files : 0,
    }));
    tiers.sort((a, b) => a.res - b.res);
    const changed = tiers.map((t) => t.name + t.res + '/' + t.retention).join() !==
      state.tiers.map((t) => t.name + t.res + '/' + t.retention).join();
    state.tiers = tiers;
    if (changed) {
      const wanted = state.wanted;
      fillSelect(el.resolution, tiers.map((t) => ({
        value: t.name,
        label: t.name,
        title: `buckets of ${spanText(t.res)}, kept ${spanText(t.retention)}`,
      })), wanted.tier);
      fillRanges(wanted.range);
      wanted.tier = null;
      wanted.range = null;
    }
    renderDisk();
  }

  // ---------------------------------------------------------------- status panel

  function parseMetrics(text) {
    const out = [];
    for (const line of text.split('\n')) {
      if (!line || line[0] === '#') continue;
      const m = /^([A-Za-z_:][A-Za-z0-9_:]*)(\{[^}]*\})?\s+(\S+)/.exec(line);
      if (m) out.push({ name: m[1], labels: m[2] || '', value: Number(m[3]) });
    }
    return out;
  }

  function setStat(node, text, value, title) {
    node.textContent = text;
    node.dataset.value = value === undefined ? '' : String(value);
    if (title !== undefined) node.title = title;
  }

  async function loadMetrics() {
    const text = await api('metrics', true);
    const at = performance.now();
    const samples = parseMetrics(text);
    const sum = (name) => samples.filter((s) => s.name === name).reduce((a, s) => a + s.value, 0);
    const accepted = sum('tierdb_samples_accepted_total');
    const prev = state.prevAccepted;
    state.prevAccepted = { value: accepted, at };
    if (prev && accepted >= prev.value && at > prev.at) {
      const rate = (accepted - prev.value) / ((at - prev.at) / 1000);
      setStat(el.rate, fmtRate(rate) + ' samples/s', rate.toFixed(3),
        `${fmtCount(accepted)} samples accepted since the server started`);
    } else {
      setStat(el.rate, 'measuring…', undefined, `${fmtCount(accepted)} samples accepted so far`);
    }
    const series = sum('tierdb_series');
    state.seriesTotal = series;
    setStat(el.seriesCount, fmtCount(series), series);
    const rejected = samples.filter((s) => s.name === 'tierdb_samples_rejected_total');
    const total = rejected.reduce((a, s) => a + s.value, 0);
    const byReason = rejected
      .filter((s) => s.value > 0)
      .map((s) => (/reason="([^"]*)"/.exec(s.labels) || [])[1] + ': ' + fmtCount(s.value))
      .join('\n');
    setStat(el.rejected, fmtCount(total), total, byReason || 'nothing rejected');
    el.rejected.classList.toggle('warn', total > 0);
  }

  function renderDisk() {
    const body = el.disk.tBodies[0];
    body.textContent = '';
    let total = 0;
    for (const t of state.tiers) {
      total += t.bytes;
      const tr = document.createElement('tr');
      tr.dataset.tier = t.name;
      tr.dataset.bytes = String(t.bytes);
      const name = document.createElement('th');
      name.scope = 'row';
      name.textContent = t.name;
      const bytes = document.createElement('td');
      bytes.textContent = fmtBytes(t.bytes);
      const files = document.createElement('td');
      files.className = 'muted';
      files.textContent = t.files === 1 ? '1 file' : `${t.files} files`;
      tr.append(name, bytes, files);
      body.appendChild(tr);
    }
    setStat(el.diskTotal, fmtBytes(total), total, 'period files of every tier, all preallocated');
  }

  // ---------------------------------------------------------------- series picker

  // "cpu.* host=a": the first word with a glob character goes to the server (it matches
  // names); every other word must appear in the canonical name (tags included).
  function parseSearch(text) {
    let glob = '*';
    const words = [];
    for (const word of text.trim().split(/\s+/).filter(Boolean)) {
      if (glob === '*' && /[*?[]/.test(word)) glob = word;
      else words.push(word.toLowerCase());
    }
    return { glob, words };
  }

  async function loadSeries() {
    const { glob } = parseSearch(el.search.value);
    const total = state.seriesTotal;
    const body = await api('api/v1/series?match=' + encodeURIComponent(glob));
    state.seriesTotalListed = total;
    state.series = (body.series || []).slice().sort();
    state.seriesGlob = glob;
    state.seriesLoadedAt = Date.now();
    if (!state.userTouched && state.selected.length === 0 && glob === '*') {
      state.selected = firstOfEachName(state.series, DEFAULT_SELECTED);
      if (state.selected.length) writeHash();
    }
    renderSeriesList();
  }

  function splitName(name) {
    const i = name.indexOf('{');
    return i < 0 ? [name, ''] : [name.slice(0, i), name.slice(i + 1, -1)];
  }

  function renderSeriesList() {
    const { words } = parseSearch(el.search.value);
    const matches = state.series.filter((name) => {
      const lower = name.toLowerCase();
      return words.every((w) => lower.includes(w));
    });
    const list = el.seriesList;
    list.textContent = '';
    for (const name of matches.slice(0, MAX_LISTED)) {
      const li = document.createElement('li');
      li.className = 'series-item';
      li.dataset.series = name;
      li.tabIndex = 0;
      li.setAttribute('role', 'option');
      li.title = name;
      const [base, tags] = splitName(name);
      const b = document.createElement('span');
      b.className = 'series-name';
      b.textContent = base;
      li.appendChild(b);
      if (tags) {
        const t = document.createElement('span');
        t.className = 'series-tags';
        t.textContent = tags.split(',').join(' ');
        li.appendChild(t);
      }
      list.appendChild(li);
    }
    markSelected();
    const shown = Math.min(matches.length, MAX_LISTED);
    let info = `${state.selected.length} selected · `;
    if (state.series.length === 0) {
      info += state.seriesGlob === '*' ? 'no series yet' : 'no series match';
    } else if (shown < matches.length) {
      info += `first ${shown} of ${fmtCount(matches.length)} shown; refine the filter`;
    } else {
      info += `${fmtCount(matches.length)} of ${fmtCount(state.series.length)} shown`;
    }
    el.seriesInfo.textContent = info;
  }

  function markSelected() {
    const chosen = new Set(state.selected);
    for (const li of el.seriesList.children) {
      const on = chosen.has(li.dataset.series);
      li.classList.toggle('selected', on);
      li.setAttribute('aria-selected', on ? 'true' : 'false');
    }
    const info = el.seriesInfo.textContent;
    el.seriesInfo.textContent = info.replace(/^\d+ selected/, `${state.selected.length} selected`);
  }

  function toggleSeries(name) {
    state.userTouched = true;
    const i = state.selected.indexOf(name);
    if (i >= 0) state.selected.splice(i, 1);
    else state.selected.push(name);
    markSelected();
    writeHash();
    refreshSoon({ chartsOnly: true });
  }

  // ---------------------------------------------------------------- charts

  function svgEl(name, attrs, parent) {
    const node = document.createElementNS(SVGNS, name);
    for (const k in attrs) node.setAttribute(k, attrs[k]);
    if (parent) parent.appendChild(node);
    return node;
  }

  // A colour for a new chart: the first one no other chart uses, starting from the name's
  // hash (so a series tends to keep its colour across reloads).
  function colorIndex(name) {
    let h = 0;
    for (let i = 0; i < name.length; i++) h = (h * 31 + name.charCodeAt(i)) >>> 0;
    const used = new Set([...state.charts.values()].map((c) => c.color));
    for (let k = 0; k < PALETTE; k++) {
      const c = (h + k) % PALETTE;
      if (!used.has(c)) return c;
    }
    return h % PALETTE;
  }

  function syncCharts() {
    const wanted = new Set(state.selected);
    for (const [name, chart] of state.charts) {
      if (!wanted.has(name)) {
        chart.svg.remove();
        state.charts.delete(name);
      }
    }
    for (const name of state.selected) {
      let chart = state.charts.get(name);
      if (!chart) {
        const color = colorIndex(name);
        const svg = svgEl('svg', { class: 'chart c' + color, role: 'img' });
        svg.dataset.series = name;
        svg.dataset.points = '0';
        chart = { name, svg, color, data: null, error: null, loading: true };
        state.charts.set(name, chart);
        attachHover(chart);
      }
      el.charts.appendChild(chart.svg); // keeps the selection order
    }
    let empty = el.charts.querySelector('.empty');
    if (state.selected.length === 0) {
      if (!empty) {
        empty = document.createElement('p');
        empty.className = 'empty';
        el.charts.appendChild(empty);
      }
      if (state.seriesError) {
        empty.textContent = 'Cannot list the series: see the error above.';
      } else if (state.series.length || state.seriesGlob !== '*') {
        empty.textContent = 'No series selected: pick one or more from the list.';
      } else {
        empty.textContent = 'No series yet. Send samples (Graphite, Influx line protocol or JSON) and they will show up here.';
      }
    } else if (empty) {
      empty.remove();
    }
    for (const chart of state.charts.values()) if (chart.loading) drawChart(chart);
  }

  async function loadChart(chart, q, gen) {
    const path = 'api/v1/query?series=' + encodeURIComponent(chart.name) +
      '&tier=' + encodeURIComponent(q.tier) +
      '&from=' + encodeURIComponent('-' + q.range) +
      '&to=now&display=' + encodeURIComponent(q.display);
    try {
      const data = await api(path);
      if (gen !== state.gen) return;
      chart.data = data;
      chart.error = null;
    } catch (e) {
      if (gen !== state.gen) return;
      chart.data = null;
      chart.error = e;
    }
    chart.loading = false;
    chart.request = q;
    drawChart(chart);
  }

  function niceScale(lo, hi, count) {
    if (!(hi > lo)) {
      // A flat line: zero on one edge, the line in the middle.
      if (lo > 0) {
        hi *= 2;
        lo = 0;
      } else if (lo < 0) {
        lo *= 2;
        hi = 0;
      } else {
        hi = 1;
      }
    }
    const raw = (hi - lo) / Math.max(1, count);
    const mag = Math.pow(10, Math.floor(Math.log10(raw)));
    const norm = raw / mag;
    const step = (norm <= 1 ? 1 : norm <= 2 ? 2 : norm <= 2.5 ? 2.5 : norm <= 5 ? 5 : 10) * mag;
    const first = Math.floor(lo / step + 1e-9);
    const last = Math.ceil(hi / step - 1e-9);
    const ticks = [];
    for (let i = first; i <= last; i++) ticks.push(i * step);
    return { lo: first * step, hi: last * step, step, ticks };
  }

  const TIME_STEPS = [
    60, 120, 300, 600, 900, 1800, HOUR, 2 * HOUR, 3 * HOUR, 6 * HOUR, 12 * HOUR,
    DAY, 2 * DAY, 7 * DAY, 14 * DAY,
    { months: 1 }, { months: 2 }, { months: 3 }, { months: 6 },
    { months: 12 }, { months: 24 }, { months: 60 }, { months: 120 },
  ];

  function stepSecs(step) {
    return typeof step === 'number' ? step : step.months * 30.44 * DAY;
  }

  // Ticks at round local times: minutes and hours of the local clock, local midnights,
  // Mondays, first days of months, New Years.
  function timeTicks(from, to, maxTicks) {
    const span = to - from;
    const step = TIME_STEPS.find((s) => span / stepSecs(s) <= maxTicks) || TIME_STEPS[TIME_STEPS.length - 1];
    const ticks = [];
    if (typeof step === 'number' && step < DAY) {
      const off = -new Date(from * 1000).getTimezoneOffset() * 60;
      for (let t = Math.ceil((from + off) / step) * step - off; t <= to; t += step) ticks.push(t);
    } else if (typeof step === 'number') {
      const d = new Date(from * 1000);
      d.setHours(0, 0, 0, 0);
      if (d.getTime() < from * 1000) d.setDate(d.getDate() + 1);
      if (step >= 7 * DAY) while (d.getDay() !== 1) d.setDate(d.getDate() + 1);
      for (; d.getTime() <= to * 1000; d.setDate(d.getDate() + step / DAY)) ticks.push(d.getTime() / 1000);
    } else {
      const d = new Date(from * 1000);
      const n = step.months;
      let y = d.getFullYear();
      let m = d.getMonth();
      let first = new Date(y, m, 1);
      if (first.getTime() < from * 1000) m += 1;
      let idx = y * 12 + m;
      idx = Math.ceil(idx / n) * n;
      for (;; idx += n) {
        first = new Date(Math.floor(idx / 12), idx % 12, 1);
        if (first.getTime() > to * 1000) break;
        ticks.push(first.getTime() / 1000);
      }
    }
    // Labels; the ones that start a larger unit (a day, a year) are marked strong.
    return ticks.map((t) => {
      const d = new Date(t * 1000);
      if (typeof step === 'number' && step < DAY) {
        const midnight = d.getHours() === 0 && d.getMinutes() === 0;
        return { t, label: midnight ? dayLabel(d) : hhmm(d), strong: midnight };
      }
      if (typeof step === 'number') return { t, label: dayLabel(d), strong: d.getDate() === 1 };
      const newYear = d.getMonth() === 0;
      if (step.months >= 12 || newYear) return { t, label: String(d.getFullYear()), strong: newYear && step.months < 12 };
      return { t, label: MONTHS[d.getMonth()], strong: false };
    });
  }

  function truncate(text, maxChars) {
    return text.length <= maxChars ? text : text.slice(0, Math.max(1, maxChars - 1)) + '…';
  }

  function chartSize(svg) {
    const width = Math.max(260, Math.floor(svg.getBoundingClientRect().width || el.charts.clientWidth || 600));
    return { W: width, H: width < 560 ? 210 : 250 };
  }

  function drawChart(chart) {
    const svg = chart.svg;
    const { W, H } = chartSize(svg);
    svg.setAttribute('viewBox', `0 0 ${W} ${H}`); // CSS: width 100%, height from the ratio
    svg.textContent = '';
    const data = chart.data;
    const req = chart.request || {};
    svg.dataset.series = chart.name;
    svg.classList.toggle('chart-error', !!chart.error);
    svg.setAttribute('aria-label', chart.name);
    svgEl('title', {}, svg).textContent = chart.name;

    const maxChars = Math.floor((W - 24) / 7.6);
    svgEl('text', { class: 'chart-title', x: 12, y: 22 }, svg).textContent = truncate(chart.name, maxChars);
    const sub = svgEl('text', { class: 'chart-sub', x: 12, y: 40 }, svg);

    if (!data) {
      svg.dataset.points = '0';
      svg.dataset.tier = req.tier || el.resolution.value || '';
      svg.dataset.window = '';
      svg.dataset.display = req.display || el.display.value;
      const msg = svgEl('text', { class: chart.error ? 'chart-message error-text' : 'chart-message', x: W / 2, y: H / 2 + 10 }, svg);
      if (chart.error) {
        sub.textContent = truncate(`${svg.dataset.tier} · ${svg.dataset.display}`, maxChars);
        msg.textContent = truncate(chart.error.describe ? chart.error.describe() : String(chart.error), Math.floor((W - 24) / 6.6));
      } else {
        sub.textContent = 'loading…';
        msg.textContent = 'loading…';
      }
      chart.layout = null;
      if (chart.hideHover) chart.hideHover();
      return;
    }

    const tier = state.tiers.find((t) => t.name === data.tier);
    const points = data.points || [];
    let step = tier ? tier.res : 0;
    if (!step) step = points.length > 1 ? points[1][0] - points[0][0] : 60;
    const from = points.length ? points[0][0] : Date.now() / 1000;
    const to = points.length ? points[points.length - 1][0] + step : from + step;
    const values = points.filter((p) => p[1] !== null && p[1] !== undefined && isFinite(p[1]));
    const drawn = values.length;
    svg.dataset.points = String(drawn);
    svg.dataset.tier = data.tier;
    svg.dataset.window = `${from}..${to}`;
    svg.dataset.display = data.display;
    const displayName = data.display === 'per_sec' ? 'avg/sec' : data.display;
    const subChars = Math.floor((W - 24) / 6.3);
    const head = `${data.tier} · ${displayName} · ${fmtWindow(from, to, step)} · `;
    const long = `${head}${drawn} of ${points.length} buckets`;
    sub.textContent = truncate(long.length <= subChars ? long : `${head}${drawn}/${points.length}`, subChars);

    // Scales.
    let lo = Infinity;
    let hi = -Infinity;
    for (const [, v] of values) {
      if (v < lo) lo = v;
      if (v > hi) hi = v;
    }
    if (!drawn) {
      lo = 0;
      hi = 1;
    } else {
      if (lo > 0 && lo < hi - lo) lo = 0;
      if (hi < 0 && -hi < hi - lo) hi = 0;
    }
    const plotH = H - 56 - 26;
    const y = niceScale(lo, hi, plotH < 140 ? 4 : 5);
    const fmtTick = tickFormatter(y.lo, y.hi, y.step);
    const labels = y.ticks.map(fmtTick);
    const ML = Math.max(34, 10 + 6.6 * Math.max(...labels.map((l) => l.length)));
    const MR = 14;
    const MT = 56;
    const MB = 26;
    const x0 = ML;
    const x1 = W - MR;
    const y0 = MT;
    const y1 = H - MB;
    const sx = (t) => x0 + ((t - from) / (to - from)) * (x1 - x0);
    const sy = (v) => y1 - ((v - y.lo) / (y.hi - y.lo)) * (y1 - y0);

    const grid = svgEl('g', { class: 'grid' }, svg);
    y.ticks.forEach((v, i) => {
      const py = sy(v).toFixed(1);
      svgEl('line', { x1: x0, x2: x1, y1: py, y2: py, class: v === 0 ? 'zero' : '' }, grid);
      svgEl('text', { class: 'tick y', x: x0 - 6, y: Number(py) + 4 }, grid).textContent = labels[i];
    });
    const ticks = timeTicks(from, to, Math.max(2, Math.floor((x1 - x0) / 64)));
    for (const tick of ticks) {
      const px = sx(tick.t);
      if (px < x0 - 0.5 || px > x1 + 0.5) continue;
      svgEl('line', { x1: px.toFixed(1), x2: px.toFixed(1), y1: y0, y2: y1, class: 'v' }, grid);
      svgEl('line', { x1: px.toFixed(1), x2: px.toFixed(1), y1: y1, y2: y1 + 4, class: 'tick-mark' }, grid);
      // Labels near an edge are anchored inside the chart rather than cut.
      const halfWidth = tick.label.length * 3.4;
      const anchor = px + halfWidth > W - 2 ? ' end' : px - halfWidth < 2 ? ' start' : '';
      const at = anchor === ' end' ? W - 2 : anchor === ' start' ? 2 : px;
      const text = svgEl('text', { class: 'tick x' + anchor + (tick.strong ? ' strong' : ''), x: at.toFixed(1), y: y1 + 17 }, grid);
      text.textContent = tick.label;
    }
    svgEl('line', { class: 'axis', x1: x0, x2: x1, y1: y1, y2: y1 }, svg);

    // Line and area, broken at every empty bucket (empty is not zero).
    const half = step / 2;
    let line = '';
    let area = '';
    const base = sy(Math.max(y.lo, Math.min(0, y.hi))).toFixed(1);
    let run = [];
    const flush = () => {
      if (run.length === 1) {
        svgEl('circle', { class: 'dot', cx: run[0][0], cy: run[0][1], r: 2.5 }, svg);
      } else if (run.length > 1) {
        line += 'M' + run.map((p) => p.join(',')).join('L');
        area += `M${run[0][0]},${base}L` + run.map((p) => p.join(',')).join('L') + `L${run[run.length - 1][0]},${base}Z`;
      }
      run = [];
    };
    for (const [t, v] of points) {
      if (v === null || v === undefined || !isFinite(v)) {
        flush();
        continue;
      }
      run.push([sx(t + half).toFixed(1), sy(v).toFixed(1)]);
    }
    flush();
    if (area) svgEl('path', { class: 'area', d: area }, svg);
    if (line) svgEl('path', { class: 'line', d: line }, svg);
    if (!drawn) {
      svgEl('text', { class: 'chart-message', x: (x0 + x1) / 2, y: (y0 + y1) / 2 + 4 }, svg).textContent =
        'no samples in this window';
    }

    const hover = svgEl('g', { class: 'hover', visibility: 'hidden' }, svg);
    chart.rule = svgEl('line', { class: 'rule', x1: 0, x2: 0, y1: y0, y2: y1 }, hover);
    chart.hoverDot = svgEl('circle', { class: 'hover-dot', cx: 0, cy: 0, r: 4 }, hover);
    chart.hover = hover;
    chart.hit = svgEl('rect', { class: 'hit', x: x0, y: y0, width: Math.max(0, x1 - x0), height: Math.max(0, y1 - y0) }, svg);
    chart.layout = { W, from, to, step, x0, x1, sx, sy, points, unit: DISPLAY_UNIT[data.display] || '' };
    if (chart.replayHover) chart.replayHover();
  }

  function attachHover(chart) {
    const svg = chart.svg;
    const hide = () => {
      if (chart.hover) chart.hover.setAttribute('visibility', 'hidden');
      if (chart.pointer) el.tooltip.hidden = true;
      chart.pointer = null;
    };
    const move = (ev) => {
      const L = chart.layout;
      if (!L || !L.points.length) return hide();
      chart.pointer = { clientX: ev.clientX, clientY: ev.clientY };
      const rect = svg.getBoundingClientRect();
      const px = ((ev.clientX - rect.left) / rect.width) * L.W;
      if (px < L.x0 - 4 || px > L.x1 + 4) return hide();
      const t = L.from + ((px - L.x0) / (L.x1 - L.x0)) * (L.to - L.from);
      let i = Math.floor((t - L.points[0][0]) / L.step);
      i = Math.max(0, Math.min(L.points.length - 1, i));
      const [ts, v] = L.points[i];
      const cx = L.sx(ts + L.step / 2);
      chart.rule.setAttribute('x1', cx.toFixed(1));
      chart.rule.setAttribute('x2', cx.toFixed(1));
      const has = v !== null && v !== undefined && isFinite(v);
      chart.hoverDot.setAttribute('visibility', has ? 'visible' : 'hidden');
      if (has) {
        chart.hoverDot.setAttribute('cx', cx.toFixed(1));
        chart.hoverDot.setAttribute('cy', L.sy(v).toFixed(1));
      }
      chart.hover.setAttribute('visibility', 'visible');
      const tip = el.tooltip;
      tip.textContent = '';
      const when = document.createElement('div');
      when.className = 'tip-time';
      when.textContent = fmtMoment(ts, L.step, true) + (L.step < DAY ? ` (+${spanText(L.step)})` : '');
      const what = document.createElement('div');
      what.className = has ? 'tip-value' : 'tip-value empty';
      what.textContent = has ? fmtValue(v) + L.unit : 'no samples';
      tip.append(when, what);
      tip.hidden = false;
      const tw = tip.offsetWidth;
      const th = tip.offsetHeight;
      let left = ev.clientX + 14;
      if (left + tw > window.innerWidth - 8) left = ev.clientX - tw - 14;
      let top = ev.clientY - th - 12;
      if (top < 8) top = ev.clientY + 16;
      tip.style.left = Math.max(8, left) + 'px';
      tip.style.top = top + 'px';
    };
    svg.addEventListener('pointermove', move);
    svg.addEventListener('pointerdown', move);
    // A mouse leaving hides the readout; a finger lifting leaves it until the next touch.
    svg.addEventListener('pointerleave', (ev) => {
      if (ev.pointerType !== 'touch') hide();
    });
    chart.hideHover = hide;
    // After a redraw (every refresh), the readout follows the new data under the pointer.
    chart.replayHover = () => {
      if (chart.pointer) move(chart.pointer);
    };
  }

  function hideAllHovers() {
    for (const chart of state.charts.values()) if (chart.hideHover) chart.hideHover();
  }
  document.addEventListener('pointerdown', (ev) => {
    if (!ev.target.closest || !ev.target.closest('svg.chart')) hideAllHovers();
  });
  window.addEventListener('scroll', hideAllHovers, { passive: true });

  function redrawAll() {
    for (const chart of state.charts.values()) drawChart(chart);
  }

  // ---------------------------------------------------------------- refresh loop

  let timer = null;
  let running = false;
  let again = null;

  function refreshSoon(opts) {
    state.gen += 1;
    opts = opts || {};
    if (running) {
      // Run once more when this one ends, doing what both asked for.
      again = again
        ? { chartsOnly: again.chartsOnly && opts.chartsOnly, series: again.series || opts.series }
        : opts;
      return;
    }
    clearTimeout(timer);
    run(opts);
  }

  async function run(opts) {
    running = true;
    const gen = state.gen;
    try {
      await refresh(gen, opts);
    } catch (e) {
      showErrors([e]);
    } finally {
      running = false;
      clearTimeout(timer);
      if (again) {
        const next = again;
        again = null;
        run(next);
      } else {
        timer = setTimeout(tick, REFRESH_MS);
      }
    }
  }

  // The 5 s cycle pauses while the page is hidden and catches up when it is shown again.
  function tick() {
    if (document.hidden) timer = setTimeout(tick, REFRESH_MS);
    else run({});
  }
  document.addEventListener('visibilitychange', () => {
    if (!document.hidden && !running) {
      clearTimeout(timer);
      run({});
    }
  });

  async function refresh(gen, opts) {
    const errors = [];
    const keep = (p) => p.catch((e) => { errors.push(e); });
    // A control change redraws the charts only; the 5 s cycle reads everything.
    const full = !opts.chartsOnly || state.tiers.length === 0;
    if (full) {
      // A failed read greys its figures out (and replaces the never-loaded "…").
      const figures = (nodes, ok) => {
        for (const node of nodes) {
          node.classList.toggle('stale', !ok);
          if (!ok && node.textContent === '…') node.textContent = '—';
        }
      };
      const tasks = [
        keep(loadTiers().then(
          () => figures([el.diskTotal], true),
          (e) => { figures([el.diskTotal], false); throw e; },
        )),
        keep(loadMetrics().then(
          () => figures([el.rate, el.seriesCount, el.rejected], true),
          (e) => { figures([el.rate, el.seriesCount, el.rejected], false); throw e; },
        )),
      ];
      const { glob } = parseSearch(el.search.value);
      // The list is read again when asked, when the glob changed, when the server's series
      // count moved since the last read, and every 30 s.
      if (opts.series || glob !== state.seriesGlob || state.seriesTotal !== state.seriesTotalListed ||
          Date.now() - state.seriesLoadedAt > SERIES_REFRESH_MS) {
        tasks.push(loadSeries().then(
          () => { state.seriesError = null; },
          (e) => { state.seriesError = e; errors.push(e); },
        ));
      }
      await Promise.all(tasks);
    }
    syncCharts();
    if (!state.tiers.length) {
      // Without the tier list there is no resolution to ask for: say why on every chart.
      for (const chart of state.charts.values()) {
        chart.loading = false;
        chart.data = null;
        chart.error = errors[0] || new Error('no tiers configured');
        drawChart(chart);
      }
    } else if (el.range.value) {
      const q = { tier: el.resolution.value, range: el.range.value, display: el.display.value };
      await Promise.all([...state.charts.values()].map((chart) => loadChart(chart, q, gen)));
    }
    if (gen !== state.gen || !full) return;
    // The banner and the clock follow the full reads (chart errors show on their charts).
    showErrors(errors);
    el.updated.textContent = errors.length ? 'update failed' : 'updated ' + new Date().toLocaleTimeString('en-GB');
    el.updated.classList.toggle('stale', errors.length > 0);
  }

  // ---------------------------------------------------------------- wiring

  el.resolution.addEventListener('change', () => {
    fillRanges(null);
    writeHash();
    refreshSoon({ chartsOnly: true });
  });
  el.range.addEventListener('change', () => {
    writeHash();
    refreshSoon({ chartsOnly: true });
  });
  el.display.addEventListener('change', () => {
    writeHash();
    refreshSoon({ chartsOnly: true });
  });
  document.getElementById('controls').addEventListener('submit', (e) => e.preventDefault());

  let searchTimer = null;
  el.search.addEventListener('input', () => {
    renderSeriesList();
    clearTimeout(searchTimer);
    searchTimer = setTimeout(() => {
      writeHash();
      if (parseSearch(el.search.value).glob !== state.seriesGlob) refreshSoon({ series: true });
    }, 250);
  });

  el.seriesList.addEventListener('click', (e) => {
    const li = e.target.closest('.series-item');
    if (li) toggleSeries(li.dataset.series);
  });
  el.seriesList.addEventListener('keydown', (e) => {
    const li = e.target.closest('.series-item');
    if (!li) return;
    if (e.key === 'Enter' || e.key === ' ') {
      e.preventDefault();
      toggleSeries(li.dataset.series);
    } else if (e.key === 'ArrowDown' && li.nextElementSibling) {
      e.preventDefault();
      li.nextElementSibling.focus();
    } else if (e.key === 'ArrowUp' && li.previousElementSibling) {
      e.preventDefault();
      li.previousElementSibling.focus();
    }
  });
  el.seriesClear.addEventListener('click', () => {
    state.userTouched = true;
    state.selected = [];
    markSelected();
    writeHash();
    refreshSoon({ chartsOnly: true });
  });

  // Charts are drawn to their pixel width: redraw when the column's width changes.
  let lastWidth = 0;
  const onResize = () => {
    const width = el.charts.clientWidth;
    if (width !== lastWidth) {
      lastWidth = width;
      redrawAll();
    }
  };
  if (window.ResizeObserver) new ResizeObserver(onResize).observe(el.charts);
  else window.addEventListener('resize', onResize);

  // Initial view: from the address's #hash when present.
  const wanted = state.wanted;
  if (wanted.display && [...el.display.options].some((o) => o.value === wanted.display)) {
    el.display.value = wanted.display;
  }
  if (wanted.search) el.search.value = wanted.search;
  if (wanted.series.length) {
    state.selected = wanted.series;
    state.userTouched = true;
  }
  run({ series: true });
})();
