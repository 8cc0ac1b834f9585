// tierdb dashboard: hand-written, no dependencies, no build step. Served by `tierdb serve`
// (src/server/dashboard.rs) and talking only to the same server's HTTP API.
//
// DOM contract (tests rely on it):
//   #resolution  one <option> per configured tier, finest first (value = tier name); a raw
//       tier (kind "raw", exact points) comes last. While zoomed with the auto rule it shows
//       the tier the server chose and carries the class "auto".
//   #range       ranges for the chosen tier (value = span sent as from=-VALUE, data-seconds)
//   #display     per_sec (avg/sec), total, avg, max, min, count, and the percentiles p50, p90,
//       p99 (of distribution series: StatsD timers, Prometheus native and OTLP histograms,
//       read as `display=pNN`); at the raw tier every option but avg ("value") is disabled:
//       raw points are not buckets
//   #series-search  filters the list and the charts: a chart none of whose series (or, for an
//       aggregate, its selector) matches gets the class "filtered-out" and is not shown
//   #series-list > li.series-item[data-series=<canonical name>] (.selected: it has a chart of
//       its own), #series-combine: the selected series' charts become one chart
//   #agg-form: #agg-fn (sum|avg|max|min|count), #agg-match (selector), #agg-by (tag keys,
//       comma-separated), submitted (#agg-add) adds an aggregate chart
//   #charts > svg.chart[data-kind="series"|"multi"|"aggregate"][data-key][data-series]
//       [data-points][data-lines][data-tier][data-window="FROM..TO"][data-display][data-unit]
//       [data-y0][data-y1][data-filled][data-partial][data-before][data-after]
//       [data-overflowed][data-relative-error][data-no-percentiles]
//       data-series: the one series of a "series" chart; data-points: non-null points drawn,
//       over all lines; data-lines: lines with at least one point; data-window: unix seconds
//       of the window shown; data-unit: the y axis' unit ("%", "B", "/s", "B/s" or "");
//       data-y0 / data-y1: the y axis' lowest / highest value; data-filled: "1" when the area under the line is
//       filled (one line of buckets: then data-y0 is at most 0); data-partial: the start of
//       the last bucket when its period has not ended (drawn hollow, dashed, not filled),
//       else ""; data-before / data-after: "1" when a raw chart drew its lines to the edge
//       from the neighbour outside the window; data-overflowed: points whose value
//       overflowed (+Inf, -Inf, or NaN where the two met, in the API's JSON), not drawn,
//       counted in the subtitle and read as "+Inf"/"-Inf"/"NaN" in the hover readout;
//       data-relative-error: with a percentile display, the largest relative error the answers state for their quantiles (shown as
//       "p99 ±0.55%" in the subtitle and the readout), else ""; data-no-percentiles: with a
//       percentile display, the chart's series that are not distributions (no histograms,
//       so no percentiles): left out, named "(no percentiles)" in the legend, and a chart
//       with none left says so in its plot (text.chart-message.no-percentiles)
//     > g.legend > g.legend-item[data-name] (charts of more than one line), text.chart-note
//       (a percentile answer's note: series left out of an aggregate, points without a
//       histogram), .chart-close
//       (removes the chart), .partial (the still-filling bucket's mark)
//   Time: #pan-back / #pan-fwd move the window by half its span; #zoom-back undoes the last
//     zoom, pan or picked range; #live returns to the range ending now. A drag across a chart
//     zooms into that span with the tier the server's `auto` rule picks. #time-from /
//     #time-to / #time-apply pick an absolute window (YYYY-MM-DD HH:MM in the zone shown, or
//     unix seconds; #time-error says what is wrong); #tz: "local" or "utc" (the local option
//     names the browser's zone). #view-info says which window and tier are shown,
//     data-mode="live"|"fixed".
//   #status: #stat-rate (data-value = samples/s averaged over data-window seconds, up to a
//       minute), #stat-series, #stat-rejected, #stat-disk-total (data-value = raw number),
//       #stat-disk rows tr[data-tier] (data-bytes)
//   #error: visible (not [hidden]) while an API call fails
//
// The view lives in the address's #hash: tier, range, display, filter, zone, the charts in
// order (s=<series>, m=<JSON list of series>, a=<agg>|<selector>|<group by>) and a fixed
// window (from, to, zt = its tier or "auto"), so a reload restores it.
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
  const PALETTE = 8;
  // Series one combined chart may hold, and lines an aggregate chart draws (its largest
  // groups first).
  const MAX_LINES = 12;
  // The ingest rate is averaged over this long (readings of /metrics kept in the page).
  const RATE_WINDOW_MS = 60000;
  // ... and shown once the readings span this long: agents flush every 10 s or so, and a
  // shorter span sees zero flushes or two.
  const RATE_MIN_SPAN_MS = 15000;
  // The narrowest window a drag may zoom into, in buckets of the finest tier.
  const MIN_ZOOM_BUCKETS = 5;
  const AGGREGATIONS = ['sum', 'avg', 'max', 'min', 'count'];
  const LOCAL_ZONE = (Intl.DateTimeFormat().resolvedOptions().timeZone || 'local time');

  const $ = (id) => document.getElementById(id);
  const el = {
    resolution: $('resolution'),
    range: $('range'),
    display: $('display'),
    search: $('series-search'),
    seriesList: $('series-list'),
    seriesInfo: $('series-info'),
    seriesClear: $('series-clear'),
    seriesCombine: $('series-combine'),
    aggForm: $('agg-form'),
    aggFn: $('agg-fn'),
    aggMatch: $('agg-match'),
    aggBy: $('agg-by'),
    panBack: $('pan-back'),
    panFwd: $('pan-fwd'),
    zoomBack: $('zoom-back'),
    live: $('live'),
    timeForm: $('time-form'),
    timeFrom: $('time-from'),
    timeTo: $('time-to'),
    timeError: $('time-error'),
    tz: $('tz'),
    viewInfo: $('view-info'),
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
    tiers: [], // {name, res, retention, windowStart, bytes, files, raw}, finest first, raw last
    clockSkew: 0, // the server's clock (from /api/v1/tiers) minus the browser's, seconds
    series: [], // canonical names for the current server-side glob, sorted
    seriesGlob: null,
    seriesLoadedAt: 0,
    seriesError: null,
    seriesTotal: null, // tierdb_series at the last /metrics read
    seriesTotalListed: undefined, // ... when the list was last read
    // The charts, in order: {kind: 'series'|'multi', names} or {kind: 'aggregate', agg,
    // match, by}.
    views: [],
    userTouched: false, // once the user picks series, empty stays empty
    charts: new Map(), // view key -> {key, view, svg, color, data, error, request}
    rateReadings: [], // {value, at}: samples accepted at each /metrics read, the last minute
    // A fixed window, {from, to, tier} (tier: a tier's name or 'auto'), or null: the range
    // ending now. `history` holds the views before each zoom, pan or picked window.
    fixed: null,
    history: [],
    // While a fixed window is read with the auto rule (#resolution then shows the tier it
    // chose): the resolution and range of the live view to return to.
    live: null,
    displayBeforeRaw: null, // the display to restore when leaving the raw tier
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

  // The zone times are shown in: UTC, or the browser's own. Date fields are read and set
  // through here, so every label and tick follows the choice.
  const Z = {
    utc: false,
    get(d, field) {
      return d[(this.utc ? 'getUTC' : 'get') + field]();
    },
    set(d, field, ...args) {
      return d[(this.utc ? 'setUTC' : 'set') + field](...args);
    },
    date(y, m, day) {
      return this.utc ? new Date(Date.UTC(y, m, day)) : new Date(y, m, day);
    },
    offset(ts) {
      return this.utc ? 0 : -new Date(ts * 1000).getTimezoneOffset() * 60;
    },
    name() {
      return this.utc ? 'UTC' : LOCAL_ZONE;
    },
  };

  function hhmm(d) {
    return pad2(Z.get(d, 'Hours')) + ':' + pad2(Z.get(d, 'Minutes'));
  }

  function dayLabel(d) {
    return MONTHS[Z.get(d, 'Month')] + ' ' + Z.get(d, 'Date');
  }

  function sameDay(a, b) {
    return Z.get(a, 'FullYear') === Z.get(b, 'FullYear') && Z.get(a, 'Month') === Z.get(b, 'Month') &&
      Z.get(a, 'Date') === Z.get(b, 'Date');
  }

  // A moment in the chosen zone, as precise as the resolution needs.
  function fmtMoment(ts, res, withWeekday) {
    const d = new Date(ts * 1000);
    const day = (withWeekday ? WEEKDAYS[Z.get(d, 'Day')] + ' ' : '') + dayLabel(d);
    if (res >= DAY) return day + ' ' + Z.get(d, 'FullYear');
    if (res < 60) return day + ', ' + hhmm(d) + ':' + pad2(Z.get(d, 'Seconds'));
    return day + ', ' + hhmm(d);
  }

  function fmtWindow(from, to, res) {
    const a = new Date(from * 1000);
    const b = new Date(to * 1000);
    if (res < DAY && sameDay(a, b)) {
      return dayLabel(a) + ', ' + hhmm(a) + ' – ' + hhmm(b);
    }
    return fmtMoment(from, res) + ' – ' + fmtMoment(to, res);
  }

  // "2026-11-23 04:30" in the chosen zone: what the window fields show and read.
  function fmtInput(ts) {
    const d = new Date(ts * 1000);
    return `${Z.get(d, 'FullYear')}-${pad2(Z.get(d, 'Month') + 1)}-${pad2(Z.get(d, 'Date'))} ${hhmm(d)}` +
      (Z.get(d, 'Seconds') ? ':' + pad2(Z.get(d, 'Seconds')) : '');
  }

  // The inverse of fmtInput (seconds and the time optional), or unix seconds; NaN otherwise.
  function parseInput(text) {
    const t = String(text).trim();
    if (/^\d{9,11}$/.test(t)) return Number(t);
    const m = /^(\d{4})-(\d{1,2})-(\d{1,2})(?:[ T](\d{1,2}):(\d{2})(?::(\d{2}))?)?$/.exec(t);
    if (!m) return NaN;
    const [y, mo, d, h, mi, sec] = m.slice(1).map((x) => Number(x || 0));
    if (mo < 1 || mo > 12 || d < 1 || d > 31 || h > 23 || mi > 59 || sec > 59) return NaN;
    const date = Z.date(y, mo - 1, d);
    if (Z.get(date, 'Date') !== d) return NaN; // Feb 30 and the like
    Z.set(date, 'Hours', h, mi, sec, 0);
    return Math.floor(date.getTime() / 1000);
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

  // The unit a series' values are in, from its name: bytes, percent (cpu.* is a percentage
  // in every agent tierdb takes in), or none.
  function baseUnit(name) {
    const base = splitName(name)[0].toLowerCase();
    if (/(^|[._])(bytes?|octets)($|[._])/.test(base)) return 'B';
    if (/(^|[._])(percent|pct)($|[._])/.test(base) || /(^|[._])cpu($|[._])/.test(base)) return '%';
    return '';
  }

  // The y axis' unit for lines of `names` shown as `display`: the names' common unit, "/s"
  // for avg/sec (a percentage per second is not shown as one), none for counts and for a
  // total of percentages.
  function unitFor(names, display) {
    const units = new Set(names.map(baseUnit));
    const base = units.size === 1 ? [...units][0] : '';
    if (display === 'count') return '';
    if (display === 'per_sec') return base === 'B' ? 'B/s' : '/s';
    if (display === 'total' && base === '%') return '';
    return base;
  }

  // A percentile display (p50, p90, p99): read from distribution series' histograms.
  function isQuantile(display) {
    return /^p\d/.test(display || '');
  }

  // A relative error as the subtitle and readout show it: "±0.55%".
  function fmtRelativeError(e) {
    return '±' + Number((e * 100).toPrecision(2)) + '%';
  }

  function withUnit(text, unit) {
    if (!unit) return text;
    // "12 %", "1.5 GB", "3 k/s": a space before a unit that starts with a letter or %, none
    // before "/s" after a prefix.
    return unit === '/s' ? text + unit : text + ' ' + unit;
  }

  // A value with an SI prefix (k, M, G, T) and its unit, for readouts.
  function fmtSI(v, unit) {
    const a = Math.abs(v);
    for (const [s, name] of SI) {
      if (a >= s && s >= 1e3) return withUnit((v / s).toLocaleString('en-US', { maximumSignificantDigits: 4 }) + name, unit);
    }
    return withUnit(fmtValue(v), unit);
  }

  // Tick labels share one scale and the decimals their step needs.
  function tickFormatter(lo, hi, step, unit) {
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
    // A byte axis says kB from 1000 on: "1.5 kB" reads better than "1500 B".
    if (unit === 'B' || unit === 'B/s') {
      if (scale === 1 && top >= 1e3) {
        scale = 1e3;
        suffix = 'k';
      }
    }
    // The fewest decimals that write every multiple of the step exactly (2.5 needs one).
    let decimals = 0;
    const unitStep = step / scale;
    while (decimals < 10 && Math.abs(unitStep * 10 ** decimals - Math.round(unitStep * 10 ** decimals)) > 1e-6 * 10 ** decimals) {
      decimals += 1;
    }
    const tail = unit === '/s' ? suffix + unit : unit ? suffix + unit : suffix;
    return (v) => {
      const x = v / scale;
      return Math.abs(x) < step / scale / 2 ? '0' : x.toFixed(decimals) + tail;
    };
  }

  // ---------------------------------------------------------------- URL hash (view state)

  function viewKey(v) {
    return v.kind === 'aggregate' ? `a:${v.agg}|${v.match}|${v.by}` : `${v.kind}:${JSON.stringify(v.names)}`;
  }

  // ["sum","cpu.*","host"] (agg, selector, group-by keys) as the address keeps an aggregate:
  // JSON, as the address keeps a multi-series chart, since a selector, a name or a tag may
  // hold any separator.
  function parseAggregate(text) {
    let parts;
    try {
      parts = JSON.parse(text);
    } catch (_) {
      return null;
    }
    if (!Array.isArray(parts) || parts.length !== 3 || !parts.every((x) => typeof x === 'string')) return null;
    const [agg, match, by] = parts;
    if (!AGGREGATIONS.includes(agg) || !match) return null;
    return { kind: 'aggregate', agg, match, by };
  }

  function readHash() {
    const p = new URLSearchParams(location.hash.replace(/^#/, ''));
    const views = [];
    for (const [k, v] of p) {
      if (k === 's' && v) views.push({ kind: 'series', names: [v] });
      if (k === 'm') {
        try {
          const names = JSON.parse(v);
          if (Array.isArray(names) && names.length && names.every((n) => typeof n === 'string')) {
            views.push({ kind: 'multi', names: names.slice(0, MAX_LINES) });
          }
        } catch (_) { /* a mangled address: leave that chart out */ }
      }
      if (k === 'a') {
        const agg = parseAggregate(v);
        if (agg) views.push(agg);
      }
    }
    const from = Number(p.get('from'));
    const to = Number(p.get('to'));
    const fixed = p.has('from') && p.has('to') && Number.isFinite(from) && Number.isFinite(to) && from < to
      ? { from, to, tier: p.get('zt') || 'auto' } : null;
    return {
      tier: p.get('tier'),
      range: p.get('range'),
      display: p.get('display'),
      views,
      search: p.get('q'),
      tz: p.get('tz'),
      fixed,
    };
  }

  function writeHash() {
    const p = new URLSearchParams();
    const live = state.live || { tier: el.resolution.value, range: el.range.value };
    if (live.tier) p.set('tier', live.tier);
    if (live.range) p.set('range', live.range);
    p.set('display', el.display.value);
    if (el.search.value) p.set('q', el.search.value);
    if (Z.utc) p.set('tz', 'utc');
    if (state.fixed) {
      p.set('from', String(state.fixed.from));
      p.set('to', String(state.fixed.to));
      p.set('zt', state.fixed.tier);
    }
    for (const v of state.views) {
      if (v.kind === 'series') p.append('s', v.names[0]);
      else if (v.kind === 'multi') p.append('m', JSON.stringify(v.names));
      else p.append('a', JSON.stringify([v.agg, v.match, v.by]));
    }
    history.replaceState(null, '', location.pathname + location.search + '#' + p.toString());
  }

  // ---------------------------------------------------------------- tiers, resolution, range

  function rangesFor(tier) {
    // The raw tier has no buckets: from five minutes of points to all it keeps.
    const lo = tier.raw ? 300 : MIN_BUCKETS * tier.res;
    const hi = tier.raw ? tier.retention : Math.min(MAX_BUCKETS * tier.res, tier.retention);
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
      const base = splitName(name)[0];
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
    if (Number.isFinite(body.now)) state.clockSkew = body.now - Date.now() / 1000;
    // A raw tier (kind "raw") has no resolution: it is offered last, as "raw".
    const tiers = (body.tiers || []).map((t) => ({
      name: t.name,
      raw: t.kind === 'raw',
      res: t.kind === 'raw' ? 0 : spanSecs(t.resolution),
      retention: spanSecs(t.retention),
      windowStart: t.window_start,
      bytes: t.disk ? t.disk.bytes : 0,
      files: t.disk ? t.disk.files : 0,
    }));
    tiers.sort((a, b) => (a.raw - b.raw) || (a.res - b.res));
    const changed = tiers.map((t) => t.name + t.res + '/' + t.retention).join() !==
      state.tiers.map((t) => t.name + t.res + '/' + t.retention).join();
    state.tiers = tiers;
    if (changed) {
      const wanted = state.wanted;
      // A [[set]]'s tiers ("set/tier") show in the disk table; the resolutions offered are
      // the default set's, and "auto" reads each series through its own set's tiers.
      fillSelect(el.resolution, tiers.filter((t) => !t.name.includes('/')).map((t) => ({
        value: t.name,
        label: t.name,
        title: t.raw
          ? `exact points (no buckets), kept ${spanText(t.retention)}`
          : `buckets of ${spanText(t.res)}, kept ${spanText(t.retention)}`,
      })), wanted.tier);
      fillRanges(wanted.range);
      wanted.tier = null;
      wanted.range = null;
      syncDisplayForTier();
    }
    renderDisk();
  }

  function serverNow() {
    return Date.now() / 1000 + state.clockSkew;
  }

  function tierByName(name) {
    return state.tiers.find((t) => t.name === name);
  }

  // The tier the charts read: the fixed window's (a name or "auto"), else the chosen one.
  function queryTier() {
    return state.fixed ? state.fixed.tier : el.resolution.value;
  }

  function rawChosen() {
    const t = tierByName(queryTier());
    return !!(t && t.raw);
  }

  // Raw points are exact values, not buckets: only "avg" (the value itself) applies. The
  // other displays are disabled, and come back when another tier is chosen.
  function syncDisplayForTier() {
    const raw = rawChosen();
    for (const opt of el.display.options) {
      const off = raw && opt.value !== 'avg';
      opt.disabled = off;
      opt.title = !off ? '' : isQuantile(opt.value)
        ? 'raw points are exact values, not buckets: no histogram per bucket, so no percentiles'
        : 'raw points are exact values, not buckets: no totals, rates or extremes per bucket';
    }
    if (raw && el.display.value !== 'avg') {
      state.displayBeforeRaw = el.display.value;
      el.display.value = 'avg';
    } else if (!raw && state.displayBeforeRaw) {
      el.display.value = state.displayBeforeRaw;
      state.displayBeforeRaw = null;
    }
    el.display.title = raw ? 'the raw tier returns exact points: each is shown as its value' : 'how each bucket is shown';
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
    // The rate over the last minute of readings (the 5 s refresh alone sees zero or two
    // agent flushes between reads, and flips between 0 and twice the rate). A restarted
    // server (the counter went down) starts the history again.
    const readings = state.rateReadings;
    if (readings.length && accepted < readings[readings.length - 1].value) readings.length = 0;
    readings.push({ value: accepted, at });
    // Keep one reading at least a minute old as the base; drop those before it.
    while (readings.length > 2 && at - readings[1].at >= RATE_WINDOW_MS) readings.shift();
    const base = readings[0];
    if (at - base.at >= RATE_MIN_SPAN_MS) {
      const secs = (at - base.at) / 1000;
      const rate = (accepted - base.value) / secs;
      setStat(el.rate, fmtRate(rate) + ' samples/s', rate.toFixed(3),
        `averaged over the last ${Math.round(secs)} s; ${fmtCount(accepted)} samples accepted since the server started`);
      el.rate.dataset.window = secs.toFixed(1);
    } else {
      setStat(el.rate, 'measuring…', undefined,
        `${fmtCount(accepted)} samples accepted so far; the rate shows after ${RATE_MIN_SPAN_MS / 1000} s`);
      el.rate.dataset.window = '0';
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
    if (!state.userTouched && state.views.length === 0 && glob === '*') {
      state.views = firstOfEachName(state.series, DEFAULT_SELECTED).map((n) => ({ kind: 'series', names: [n] }));
      if (state.views.length) writeHash();
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
    let info = `${selectedNames().length} selected · `;
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
    const chosen = new Set(selectedNames());
    for (const li of el.seriesList.children) {
      const on = chosen.has(li.dataset.series);
      li.classList.toggle('selected', on);
      li.setAttribute('aria-selected', on ? 'true' : 'false');
    }
    const info = el.seriesInfo.textContent;
    el.seriesInfo.textContent = info.replace(/^\d+ selected/, `${chosen.size} selected`);
    el.seriesCombine.disabled = chosen.size < 2;
  }

  // The series that have a chart of their own, in chart order.
  function selectedNames() {
    return state.views.filter((v) => v.kind === 'series').map((v) => v.names[0]);
  }

  // The selected series' own charts become one chart with a line each (at most MAX_LINES),
  // where the first of them was.
  function combineSelected() {
    const names = selectedNames().slice(0, MAX_LINES);
    if (names.length < 2) return;
    const at = state.views.findIndex((v) => v.kind === 'series' && names.includes(v.names[0]));
    const multi = { kind: 'multi', names };
    state.views = state.views.filter((v) => !(v.kind === 'series' && names.includes(v.names[0])));
    state.views.splice(Math.min(at, state.views.length), 0, multi);
    state.userTouched = true;
    markSelected();
    writeHash();
    refreshSoon({ chartsOnly: true });
  }

  function addAggregate(view) {
    const key = viewKey(view);
    if (!state.views.some((v) => viewKey(v) === key)) state.views.push(view);
    state.userTouched = true;
    writeHash();
    refreshSoon({ chartsOnly: true });
  }

  function removeView(key) {
    state.views = state.views.filter((v) => viewKey(v) !== key);
    state.userTouched = true;
    markSelected();
    writeHash();
    refreshSoon({ chartsOnly: true });
  }

  function toggleSeries(name) {
    state.userTouched = true;
    const i = state.views.findIndex((v) => v.kind === 'series' && v.names[0] === name);
    if (i >= 0) state.views.splice(i, 1);
    else state.views.push({ kind: 'series', names: [name] });
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

  // A glob as the server reads it (`*`, `?`, `[a-z]`, `[!a-z]`), as a RegExp over a name.
  function globRegex(glob) {
    let re = '';
    for (let i = 0; i < glob.length; i++) {
      const c = glob[i];
      const close = c === '[' ? glob.indexOf(']', i + 2) : -1;
      if (c === '*') re += '.*';
      else if (c === '?') re += '.';
      else if (close > 0) {
        const set = glob.slice(i + 1, close).replace(/\\/g, '\\\\');
        re += set[0] === '!' ? '[^' + set.slice(1) + ']' : '[' + set + ']';
        i = close;
      } else re += c.replace(/[.+^${}()|[\]\\]/g, '\\$&');
    }
    return new RegExp('^' + re + '$');
  }

  // Whether the filter shows a chart: one of its series passes the filter as a list item
  // does (the glob over the name, every other word in the name or tags); an aggregate
  // passes by its selector.
  function viewMatches(view, search) {
    const re = search.glob === '*' ? null : globRegex(search.glob);
    const names = view.kind === 'aggregate' ? [view.match] : view.names;
    return names.some((name) => {
      const base = splitName(name)[0];
      if (re && !re.test(base) && base !== search.glob) return false;
      const lower = (view.kind === 'aggregate' ? `${view.agg} ${name} ${view.by}` : name).toLowerCase();
      return search.words.every((w) => lower.includes(w));
    });
  }

  let chartIds = 0;

  function syncCharts() {
    const keys = new Set(state.views.map(viewKey));
    for (const [key, chart] of state.charts) {
      if (!keys.has(key)) {
        chart.svg.remove();
        state.charts.delete(key);
      }
    }
    const search = parseSearch(el.search.value);
    let hidden = 0;
    for (const view of state.views) {
      const key = viewKey(view);
      let chart = state.charts.get(key);
      if (!chart) {
        const color = colorIndex(key);
        const svg = svgEl('svg', { class: 'chart c' + color, role: 'img' });
        svg.dataset.key = key;
        svg.dataset.kind = view.kind;
        svg.dataset.points = '0';
        if (view.kind === 'series') svg.dataset.series = view.names[0];
        chartIds += 1;
        chart = { key, view, svg, color, id: chartIds, data: null, error: null, loading: true };
        state.charts.set(key, chart);
        attachPointer(chart);
      }
      const out = !viewMatches(view, search);
      const wasOut = chart.svg.classList.contains('filtered-out');
      chart.svg.classList.toggle('filtered-out', out);
      if (out) hidden += 1;
      el.charts.appendChild(chart.svg); // keeps the views' order
      if (wasOut && !out) drawChart(chart); // drawn to its width now that it has one
    }
    let empty = el.charts.querySelector('.empty');
    if (state.views.length === 0 || hidden === state.views.length) {
      if (!empty) {
        empty = document.createElement('p');
        empty.className = 'empty';
      }
      el.charts.prepend(empty);
      if (hidden) {
        empty.textContent = `The filter hides every chart (${hidden}): change or clear it to see them.`;
      } else if (state.seriesError) {
        empty.textContent = 'Cannot list the series: see the error above.';
      } else if (state.series.length || state.seriesGlob !== '*') {
        empty.textContent = 'No charts: pick one or more series from the list, or chart an aggregate.';
      } else {
        empty.textContent = 'No series yet. Send samples (Graphite, Influx line protocol or JSON) and they will show up here.';
      }
    } else if (empty) {
      empty.remove();
    }
    let note = el.charts.querySelector('.filter-note');
    if (hidden && hidden < state.views.length) {
      if (!note) {
        note = document.createElement('p');
        note.className = 'filter-note';
      }
      el.charts.prepend(note);
      note.textContent = `${hidden} of ${state.views.length} charts hidden by the filter`;
    } else if (note) {
      note.remove();
    }
    for (const chart of state.charts.values()) if (chart.loading) drawChart(chart);
  }

  function timeParams(q) {
    return q.fixed
      ? `&from=${q.fixed.from}&to=${q.fixed.to}`
      : `&from=${encodeURIComponent('-' + q.range)}&to=now`;
  }

  // "host=web-1", "host=web-1,dc=eu" or "all" (no group by).
  function groupLabel(tags, by) {
    if (!by.length) return 'all';
    return by.map((k) => `${k}=${tags && tags[k] !== null && tags[k] !== undefined ? tags[k] : '(none)'}`).join(',');
  }

  async function loadChart(chart, q, gen) {
    const view = chart.view;
    const enc = encodeURIComponent;
    let data = null;
    let error = null;
    try {
      if (view.kind === 'aggregate') {
        const tier = tierByName(q.tier);
        if (tier && tier.raw) {
          throw new Error('aggregates read the rollup tiers, not raw points: pick another resolution');
        }
        const by = view.by.split(',').map((k) => k.trim()).filter(Boolean);
        const body = await api('api/v1/aggregate?match=' + enc(view.match) + '&agg=' + enc(view.agg) +
          (by.length ? '&group_by=' + enc(by.join(',')) : '') + '&tier=' + enc(q.tier) + timeParams(q) +
          '&display=' + enc(q.display));
        const groups = (body.groups || []).map((g) => ({ name: groupLabel(g.tags, by), points: decodePoints(g.points), series: g.series }));
        groups.sort((x, y) => (x.name < y.name ? -1 : x.name > y.name ? 1 : 0));
        data = { tier: body.tier, display: body.display, step: body.step, lines: groups.slice(0, MAX_LINES), groups: groups.length };
        if (isQuantile(q.display)) {
          // Histograms merge: `agg` does not apply. Series that are not distributions are
          // left out by the server, which says so in its note.
          data.relativeError = body.relative_error;
          data.notes = body.note ? [body.note] : [];
          data.noPercentiles = 0;
        }
      } else {
        // One query per series; a series that fails leaves its line out, named in the legend.
        const answers = await Promise.allSettled(view.names.map((name) => api('api/v1/query?series=' + enc(name) +
          '&tier=' + enc(q.tier) + timeParams(q) + '&display=' + enc(q.display))));
        const ok = answers.find((a) => a.status === 'fulfilled');
        if (!ok) throw answers[0].reason;
        data = {
          tier: ok.value.tier,
          display: ok.value.display,
          lines: answers.map((a, i) => (a.status === 'fulfilled'
            ? { name: view.names[i], points: decodePoints(a.value.points), before: a.value.before, after: a.value.after }
            : { name: view.names[i], points: [], error: a.reason })),
        };
        if (isQuantile(q.display)) {
          // A series that is not a distribution is answered without points: it has no
          // percentiles, and its line says so rather than reading as empty buckets.
          data.notes = [];
          data.relativeError = undefined;
          answers.forEach((a, i) => {
            if (a.status !== 'fulfilled') return;
            const line = data.lines[i];
            if (!Array.isArray(a.value.points)) {
              line.noPercentiles = true;
              return;
            }
            const e = a.value.relative_error;
            if (Number.isFinite(e)) data.relativeError = Math.max(e, data.relativeError || 0);
            if (a.value.note) data.notes.push(view.names.length > 1 ? `${line.name}: ${a.value.note}` : a.value.note);
          });
          data.noPercentiles = data.lines.filter((l) => l.noPercentiles).length;
        }
      }
      const tier = tierByName(data.tier);
      data.raw = !!(tier && tier.raw);
      if (!data.step) data.step = tier && tier.res ? tier.res : 0;
    } catch (e) {
      error = e;
    }
    if (gen !== state.gen) return;
    chart.data = error ? null : data;
    chart.error = error;
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

  // Ticks at round times of the zone shown: minutes and hours of its clock, its midnights,
  // Mondays, first days of months, New Years.
  function timeTicks(from, to, maxTicks) {
    const span = to - from;
    const step = TIME_STEPS.find((s) => span / stepSecs(s) <= maxTicks) || TIME_STEPS[TIME_STEPS.length - 1];
    const ticks = [];
    const addDays = (d, n) => Z.set(d, 'Date', Z.get(d, 'Date') + n);
    if (typeof step === 'number' && step < DAY) {
      const off = Z.offset(from);
      for (let t = Math.ceil((from + off) / step) * step - off; t <= to; t += step) ticks.push(t);
    } else if (typeof step === 'number') {
      const d = new Date(from * 1000);
      Z.set(d, 'Hours', 0, 0, 0, 0);
      if (d.getTime() < from * 1000) addDays(d, 1);
      if (step >= 7 * DAY) while (Z.get(d, 'Day') !== 1) addDays(d, 1);
      for (; d.getTime() <= to * 1000; addDays(d, step / DAY)) ticks.push(d.getTime() / 1000);
    } else {
      const d = new Date(from * 1000);
      const n = step.months;
      const y = Z.get(d, 'FullYear');
      let m = Z.get(d, 'Month');
      let first = Z.date(y, m, 1);
      if (first.getTime() < from * 1000) m += 1;
      let idx = y * 12 + m;
      idx = Math.ceil(idx / n) * n;
      for (;; idx += n) {
        first = Z.date(Math.floor(idx / 12), idx % 12, 1);
        if (first.getTime() > to * 1000) break;
        ticks.push(first.getTime() / 1000);
      }
    }
    // Labels; the ones that start a larger unit (a day, a year) are marked strong.
    return ticks.map((t) => {
      const d = new Date(t * 1000);
      if (typeof step === 'number' && step < DAY) {
        const midnight = Z.get(d, 'Hours') === 0 && Z.get(d, 'Minutes') === 0;
        return { t, label: midnight ? dayLabel(d) : hhmm(d), strong: midnight };
      }
      if (typeof step === 'number') return { t, label: dayLabel(d), strong: Z.get(d, 'Date') === 1 };
      const newYear = Z.get(d, 'Month') === 0;
      if (step.months >= 12 || newYear) return { t, label: String(Z.get(d, 'FullYear')), strong: newYear && step.months < 12 };
      return { t, label: MONTHS[Z.get(d, 'Month')], strong: false };
    });
  }

  function truncate(text, maxChars) {
    return text.length <= maxChars ? text : text.slice(0, Math.max(1, maxChars - 1)) + '…';
  }

  function chartSize(svg) {
    const width = Math.max(260, Math.floor(svg.getBoundingClientRect().width || el.charts.clientWidth || 600));
    return { W: width, H: width < 560 ? 210 : 250 };
  }

  const finite = (v) => v !== null && v !== undefined && isFinite(v);
  // An overflowed value: an infinity, or NaN where +Inf and -Inf met in one point (a sum of
  // both). Either has samples behind it, so neither reads as an empty bucket.
  const overflowed = (v) => v === Infinity || v === -Infinity || Number.isNaN(v);
  const overflowText = (v) => (Number.isNaN(v) ? 'NaN' : v > 0 ? '+Inf' : '-Inf');

  // The API writes a value JSON has no number for as a string ("+Inf", "-Inf", "NaN": an
  // overflowed sum); as numbers, such points read as what they are, never as empty buckets.
  const NON_FINITE = { '+Inf': Infinity, '-Inf': -Infinity, NaN: NaN };
  function decodePoints(points) {
    return (points || []).map((p) => (typeof p[1] === 'string' && p[1] in NON_FINITE ? [p[0], NON_FINITE[p[1]]] : p));
  }

  // The legend's items laid out in rows from (12, top): [{name, color, x, y}], rows.
  function legendLayout(names, W, top) {
    let x = 12;
    let row = 0;
    const items = names.map((name, i) => {
      const label = truncate(name, 48);
      const width = 16 + label.length * 6.4 + 14;
      if (x > 12 && x + width > W - 12) {
        x = 12;
        row += 1;
      }
      const item = { name, label, color: i % PALETTE, x, y: top + row * 16 };
      x += width;
      return item;
    });
    return { items, rows: names.length ? row + 1 : 0 };
  }

  function chartTitle(view, display) {
    if (view.kind === 'aggregate') {
      // A percentile of an aggregate is taken of the merged histograms, whatever `agg` says.
      const how = isQuantile(display) ? `${display} of merged` : `${view.agg} of`;
      return `${how} ${view.match}${view.by ? ' by ' + view.by : ''}`;
    }
    if (view.kind === 'series') return view.names[0];
    const bases = new Set(view.names.map((n) => n.split('{')[0]));
    return bases.size === 1 ? `${[...bases][0]} · ${view.names.length} series` : view.names.join(' · ');
  }

  // The value where the segment a-b crosses time t.
  function lerp(a, b, t) {
    return b[0] === a[0] ? b[1] : a[1] + ((b[1] - a[1]) * (t - a[0])) / (b[0] - a[0]);
  }

  function drawChart(chart) {
    const svg = chart.svg;
    if (svg.classList.contains('filtered-out')) return; // drawn when the filter shows it
    const view = chart.view;
    const data = chart.data;
    const req = chart.request || {};
    const multi = view.kind !== 'series';
    let { W, H } = chartSize(svg);
    svg.textContent = '';
    svg.classList.toggle('chart-error', !!chart.error);
    const title = chartTitle(view, data ? data.display : req.display || el.display.value);
    svg.setAttribute('aria-label', title);
    svgEl('title', {}, svg).textContent = title;
    const maxChars = Math.floor((W - 48) / 7.6);
    svgEl('text', { class: 'chart-title', x: 12, y: 22 }, svg).textContent = truncate(title, maxChars);
    const sub = svgEl('text', { class: 'chart-sub', x: 12, y: 40 }, svg);
    const close = svgEl('g', { class: 'chart-close', role: 'button', tabindex: '0' }, svg);
    svgEl('title', {}, close).textContent = 'remove this chart';
    svgEl('rect', { x: W - 30, y: 6, width: 24, height: 24, rx: 5 }, close);
    svgEl('text', { x: W - 18, y: 23 }, close).textContent = '×';
    const setData = (d) => {
      for (const k of ['points', 'lines', 'tier', 'window', 'display', 'unit', 'y0', 'y1', 'filled', 'partial', 'before', 'after', 'overflowed', 'relativeError', 'noPercentiles']) {
        svg.dataset[k] = d[k] === undefined || d[k] === null ? '' : String(d[k]);
      }
    };

    if (!data) {
      setData({ points: 0, lines: 0, tier: req.tier || queryTier() || '', display: req.display || el.display.value });
      svg.setAttribute('viewBox', `0 0 ${W} ${H}`);
      const msg = svgEl('text', { class: chart.error ? 'chart-message error-text' : 'chart-message', x: W / 2, y: H / 2 + 10 }, svg);
      if (chart.error) {
        sub.textContent = truncate(`${svg.dataset.tier} · ${svg.dataset.display}`, maxChars);
        msg.textContent = truncate(chart.error.describe ? chart.error.describe() : chart.error.message || String(chart.error), Math.floor((W - 24) / 6.6));
      } else {
        sub.textContent = 'loading…';
        msg.textContent = 'loading…';
      }
      chart.layout = null;
      if (chart.hideHover) chart.hideHover();
      return;
    }

    const raw = data.raw;
    const step = data.step;
    const lines = data.lines.map((l, i) => ({ ...l, color: multi ? i % PALETTE : chart.color }));
    const now = serverNow();

    // The window: the buckets answered (all lines share the tier's grid), or for raw points
    // the window asked for.
    let from = Infinity;
    let to = -Infinity;
    if (raw) {
      from = req.window.from;
      to = req.window.to;
    } else {
      for (const l of lines) {
        if (!l.points.length) continue;
        from = Math.min(from, l.points[0][0]);
        to = Math.max(to, l.points[l.points.length - 1][0] + step);
      }
      if (!(from < to)) {
        from = req.window.from;
        to = req.window.to;
      }
    }

    // The last bucket of a rollup whose period has not ended is partial: it holds only the
    // samples so far, so a total or a rate there is a fraction of a full bucket's.
    let partialTs = null;
    if (!raw && step) {
      for (const l of lines) {
        const last = l.points[l.points.length - 1];
        if (last && last[0] + step > now) partialTs = last[0];
      }
    }

    let lo = Infinity;
    let hi = -Infinity;
    let drawn = 0;
    let overflows = 0;
    let withPoints = 0;
    const see = (v) => {
      if (v < lo) lo = v;
      if (v > hi) hi = v;
    };
    for (const l of lines) {
      let n = 0;
      for (const [, v] of l.points) {
        if (finite(v)) {
          see(v);
          n += 1;
        } else if (overflowed(v)) {
          overflows += 1;
        }
      }
      // Raw lines run to the window's edges from the neighbours outside it.
      if (raw) {
        const pts = l.points.filter((p) => finite(p[1]));
        const first = pts[0] || (finite(l.after && l.after[1]) ? l.after : null);
        const last = pts[pts.length - 1] || (finite(l.before && l.before[1]) ? l.before : null);
        l.edgeFrom = finite(l.before && l.before[1]) && first ? [from, lerp(l.before, first, from)] : null;
        l.edgeTo = finite(l.after && l.after[1]) && last ? [to, lerp(last, l.after, to)] : null;
        if (l.edgeFrom) see(l.edgeFrom[1]);
        if (l.edgeTo) see(l.edgeTo[1]);
      }
      drawn += n;
      if (n || l.edgeFrom || l.edgeTo) withPoints += 1;
    }
    const filled = !multi && !raw;
    const names = view.kind === 'aggregate' ? [view.match] : view.names;
    const unit = unitFor(names, data.display);
    if (lo > hi) {
      lo = 0;
      hi = 1;
    } else if (filled) {
      // A filled area reads as an amount: its axis starts at zero.
      lo = Math.min(lo, 0);
      hi = Math.max(hi, 0);
    } else {
      if (lo > 0 && lo < hi - lo) lo = 0;
      if (hi < 0 && -hi < hi - lo) hi = 0;
    }

    const quantile = isQuantile(data.display);
    const stated = quantile && Number.isFinite(data.relativeError) ? ' ' + fmtRelativeError(data.relativeError) : '';
    const displayName = (raw ? 'exact points' : data.display === 'per_sec' ? 'avg/sec' : data.display) + stated;
    const tierName = req.tier === 'auto' ? `${data.tier} (auto)` : data.tier;
    const subChars = Math.floor((W - 24) / 6.3);
    const head = `${tierName} · ${displayName} · ${fmtWindow(from, to, raw ? 60 : step)} ${Z.name()} · `;
    const count = raw ? `${drawn} points` : `${drawn} of ${lines.reduce((a, l) => a + l.points.length, 0)} buckets`;
    const groups = data.groups > lines.length ? ` · ${lines.length} of ${data.groups} groups` : '';
    const over = overflows ? `${overflows} overflowed (±Inf, not drawn) · ` : '';
    const noPct = data.noPercentiles || 0;
    const none = quantile && lines.length > 0 && noPct === lines.length;
    const without = !none && noPct ? ` · no percentiles for ${noPct} (not ${noPct === 1 ? 'a distribution' : 'distributions'})` : '';
    const counted = none ? `no percentiles (not ${lines.length === 1 ? 'a distribution' : 'distributions'})` : count;
    sub.textContent = truncate(head + over + counted + groups + without, subChars);

    // The legend, under the subtitle, when there is more than one line or an aggregate.
    const legendName = (l) => (l.error ? `${l.name} (failed)` : l.noPercentiles ? `${l.name} (no percentiles)` : l.name);
    const legend = multi ? legendLayout(lines.map(legendName), W, 56) : { items: [], rows: 0 };
    // A percentile answer's notes (series left out, points without a histogram), a row each
    // under the legend.
    const notes = (data.notes || []).slice(0, 3);
    const top = 56 + legend.rows * 16 + notes.length * 16; // the plot's top
    H += legend.rows * 16 + notes.length * 16;
    svg.setAttribute('viewBox', `0 0 ${W} ${H}`); // CSS: width 100%, height from the ratio
    if (legend.rows) {
      const g = svgEl('g', { class: 'legend' }, svg);
      legend.items.forEach((item, i) => {
        const li = svgEl('g', { class: `legend-item s${item.color}` }, g);
        li.dataset.name = lines[i].name;
        li.dataset.points = String(lines[i].points.filter((p) => finite(p[1])).length);
        svgEl('rect', { class: 'swatch', x: item.x, y: item.y - 9, width: 12, height: 4, rx: 1 }, li);
        const text = svgEl('text', { class: 'legend-text', x: item.x + 16, y: item.y - 4 }, li);
        text.textContent = item.label;
        if (lines[i].error) svgEl('title', {}, li).textContent = lines[i].error.describe ? lines[i].error.describe() : String(lines[i].error);
        if (lines[i].noPercentiles) svgEl('title', {}, li).textContent = 'not a distribution: it keeps no histograms, so it has no percentiles';
      });
    }
    notes.forEach((note, i) => {
      const text = svgEl('text', { class: 'chart-note', x: 12, y: 56 + legend.rows * 16 + i * 16 - 4 }, svg);
      text.textContent = truncate(note, subChars);
      svgEl('title', {}, text).textContent = note;
    });

    const plotH = H - top - 26;
    const y = niceScale(lo, hi, plotH < 140 ? 4 : 5);
    const fmtTick = tickFormatter(y.lo, y.hi, y.step, unit);
    const labels = y.ticks.map(fmtTick);
    const ML = Math.max(34, 10 + 6.6 * Math.max(...labels.map((l) => l.length)));
    const x0 = ML;
    const x1 = W - 14;
    const y0 = top;
    const y1 = H - 26;
    const sx = (t) => x0 + ((t - from) / (to - from)) * (x1 - x0);
    const sy = (v) => y1 - ((v - y.lo) / (y.hi - y.lo)) * (y1 - y0);
    setData({
      points: drawn,
      lines: withPoints,
      tier: data.tier,
      window: `${Math.round(from)}..${Math.round(to)}`,
      display: data.display,
      unit,
      y0: y.lo,
      y1: y.hi,
      filled: filled ? 1 : 0,
      partial: partialTs === null ? '' : partialTs,
      before: raw ? 0 : '',
      after: raw ? 0 : '',
      overflowed: overflows,
      relativeError: quantile && Number.isFinite(data.relativeError) ? data.relativeError : '',
      noPercentiles: quantile ? noPct : '',
    });

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

    // The lines, clipped to the plot (raw lines run from outside it).
    const clipId = `plot-${chart.id}`;
    const clip = svgEl('clipPath', { id: clipId }, svgEl('defs', {}, svg));
    svgEl('rect', { x: x0, y: y0 - 2, width: Math.max(0, x1 - x0), height: Math.max(0, y1 - y0 + 4) }, clip);
    const plot = svgEl('g', { 'clip-path': `url(#${clipId})` }, svg);
    const base = sy(Math.max(y.lo, Math.min(0, y.hi))).toFixed(1);
    const half = step / 2;
    const xy = (t, v) => [sx(t).toFixed(1), sy(v).toFixed(1)];
    if (partialTs !== null) {
      const band = svgEl('rect', { class: 'partial-band', x: sx(partialTs).toFixed(1), y: y0, width: Math.max(0, x1 - sx(partialTs)).toFixed(1), height: Math.max(0, y1 - y0) }, plot);
      svgEl('title', {}, band).textContent = 'this bucket is still filling';
    }
    for (const l of lines) {
      const cls = ` s${l.color}`;
      let line = '';
      let area = '';
      let run = [];
      const flush = () => {
        if (run.length === 1 && !raw) {
          svgEl('circle', { class: 'dot' + cls, cx: run[0][0], cy: run[0][1], r: 2.5 }, plot);
        } else if (run.length > 1) {
          line += 'M' + run.map((p) => p.join(',')).join('L');
          area += `M${run[0][0]},${base}L` + run.map((p) => p.join(',')).join('L') + `L${run[run.length - 1][0]},${base}Z`;
        }
        run = [];
      };
      if (raw) {
        // Exact points at their own times, joined; the edges from the neighbours.
        const pts = l.points.filter((p) => finite(p[1]));
        if (l.edgeFrom) run.push(xy(...l.edgeFrom));
        for (const [t, v] of pts) run.push(xy(t, v));
        if (l.edgeTo) run.push(xy(...l.edgeTo));
        if (run.length > 1) {
          if (l.edgeFrom) svg.dataset.before = '1';
          if (l.edgeTo) svg.dataset.after = '1';
        }
        flush();
        if (pts.length && pts.length <= (x1 - x0) / 6) {
          for (const [t, v] of pts) svgEl('circle', { class: 'dot' + cls, cx: sx(t).toFixed(1), cy: sy(v).toFixed(1), r: 2.2 }, plot);
        }
      } else {
        let prev = null;
        for (const [t, v] of l.points) {
          if (t === partialTs) {
            flush();
            if (!finite(v)) break;
            // Hollow, and for values comparable with a full bucket's (avg, max, min) joined
            // by a dashed segment; totals, rates and counts only so far are not joined.
            if (prev && (['avg', 'max', 'min'].includes(data.display) || quantile)) {
              svgEl('path', { class: 'partial-line' + cls, d: `M${xy(prev[0] + half, prev[1]).join(',')}L${xy(t + half, v).join(',')}` }, plot);
            }
            const mark = svgEl('circle', { class: 'partial' + cls, cx: sx(t + half).toFixed(1), cy: sy(v).toFixed(1), r: 3.5 }, plot);
            mark.dataset.ts = String(t);
            svgEl('title', {}, mark).textContent = `partial: ${Math.round(now - t)} s of this ${spanText(step)} bucket so far`;
            break;
          }
          if (!finite(v)) {
            flush();
            prev = null;
            continue;
          }
          run.push(xy(t + half, v));
          prev = [t, v];
        }
        flush();
      }
      if (area && filled) svgEl('path', { class: 'area' + cls, d: area }, plot);
      if (line) svgEl('path', { class: 'line' + cls, d: line }, plot);
    }
    if (!withPoints) {
      // With a percentile display, a chart none of whose series is a distribution says so:
      // its emptiness is not a lack of samples.
      let message = 'no samples in this window';
      let cls = 'chart-message';
      if (none) {
        message = lines.length === 1
          ? 'not a distribution: no percentiles (only timers and histograms keep them)'
          : 'none of these series is a distribution: no percentiles';
        cls += ' no-percentiles';
      } else if (quantile && view.kind === 'aggregate' && !lines.length && notes.length) {
        message = 'no distribution among the series selected: no percentiles';
        cls += ' no-percentiles';
      } else if (overflows) {
        // Samples whose values overflowed are samples: the window is not empty.
        message = `${overflows} overflowed (±Inf, not drawn)`;
      }
      svgEl('text', { class: cls, x: (x0 + x1) / 2, y: (y0 + y1) / 2 + 4 }, svg).textContent =
        truncate(message, Math.floor((x1 - x0) / 6.6));
    }

    const hover = svgEl('g', { class: 'hover', visibility: 'hidden' }, svg);
    chart.rule = svgEl('line', { class: 'rule', x1: 0, x2: 0, y1: y0, y2: y1 }, hover);
    chart.hoverDots = lines.map((l) => svgEl('circle', { class: `hover-dot s${l.color}`, cx: 0, cy: 0, r: 4 }, hover));
    chart.hover = hover;
    chart.selection = svgEl('rect', { class: 'zoom-selection', x: 0, y: y0, width: 0, height: Math.max(0, y1 - y0), visibility: 'hidden' }, svg);
    chart.hit = svgEl('rect', { class: 'hit', x: x0, y: y0, width: Math.max(0, x1 - x0), height: Math.max(0, y1 - y0) }, svg);
    const tipUnit = data.display === 'count' && !raw ? 'samples' : unit;
    const errorNote = stated ? `${data.display} within${stated} (the error the server states)` : '';
    chart.layout = { W, H, from, to, step, raw, x0, x1, sx, sy, lines, unit: tipUnit, partialTs, errorNote };
    if (chart.replayHover) chart.replayHover();
  }

  // The point of `line` under time t: the bucket holding t, or the raw point nearest t.
  function pointAt(line, t, L) {
    const pts = line.points;
    if (!pts.length) return null;
    if (!L.raw) {
      const i = Math.floor((t - pts[0][0]) / L.step);
      return pts[Math.max(0, Math.min(pts.length - 1, i))];
    }
    let lo = 0;
    let hi = pts.length - 1;
    while (lo < hi) {
      const mid = (lo + hi) >> 1;
      if (pts[mid][0] < t) lo = mid + 1;
      else hi = mid;
    }
    if (lo > 0 && Math.abs(pts[lo - 1][0] - t) <= Math.abs(pts[lo][0] - t)) lo -= 1;
    return pts[lo];
  }

  // Hover readout, drag to zoom, and the remove button.
  function attachPointer(chart) {
    const svg = chart.svg;
    let drag = null; // {startX, x} in chart units while a mouse drags across the plot
    const toChartX = (clientX) => {
      const rect = svg.getBoundingClientRect();
      return ((clientX - rect.left) / rect.width) * (chart.layout ? chart.layout.W : rect.width);
    };
    const hide = () => {
      if (chart.hover) chart.hover.setAttribute('visibility', 'hidden');
      if (chart.pointer) el.tooltip.hidden = true;
      chart.pointer = null;
    };
    const move = (ev) => {
      const L = chart.layout;
      if (!L || !L.lines.some((l) => l.points.length)) return hide();
      chart.pointer = { clientX: ev.clientX, clientY: ev.clientY };
      const px = toChartX(ev.clientX);
      if (px < L.x0 - 4 || px > L.x1 + 4) return hide();
      const t = L.from + ((px - L.x0) / (L.x1 - L.x0)) * (L.to - L.from);
      // The time under the pointer: the bucket's (rollups), or the nearest point's (raw).
      const near = L.lines.map((l) => pointAt(l, t, L));
      let ts = null;
      for (const p of near) if (p && (ts === null || Math.abs(p[0] - t) < Math.abs(ts - t))) ts = p[0];
      if (ts === null) return hide();
      const at = L.raw ? ts : ts + L.step / 2;
      const cx = L.sx(at);
      chart.rule.setAttribute('x1', cx.toFixed(1));
      chart.rule.setAttribute('x2', cx.toFixed(1));
      const tip = el.tooltip;
      tip.textContent = '';
      const when = document.createElement('div');
      when.className = 'tip-time';
      when.textContent = fmtMoment(ts, L.raw ? 1 : L.step, true) + (L.raw || L.step >= DAY ? '' : ` (+${spanText(L.step)})`) +
        ' ' + Z.name() + (ts === L.partialTs ? ' · partial, still filling' : '');
      tip.append(when);
      L.lines.forEach((l, i) => {
        const p = near[i];
        // Buckets share one grid; raw points each have their own time: the nearest is shown.
        const here = p && (L.raw || p[0] === ts);
        const has = here && finite(p[1]);
        const over = here && overflowed(p[1]);
        const dot = chart.hoverDots[i];
        dot.setAttribute('visibility', has ? 'visible' : 'hidden');
        if (has) {
          dot.setAttribute('cx', (L.raw ? L.sx(p[0]) : cx).toFixed(1));
          dot.setAttribute('cy', L.sy(p[1]).toFixed(1));
        }
        const what = document.createElement('div');
        what.className = has || over ? 'tip-value' : 'tip-value empty';
        const value = l.noPercentiles ? 'not a distribution: no percentiles'
          : has ? fmtSI(p[1], L.unit) : over ? `${overflowText(p[1])} (overflowed)` : 'no samples';
        what.textContent = L.lines.length > 1 ? `${l.name}: ${value}` : value;
        if (L.lines.length > 1) what.style.setProperty('--series', `var(--c${l.color})`);
        if (L.lines.length > 1) what.classList.add('tip-line');
        tip.append(what);
      });
      if (L.errorNote) {
        const bound = document.createElement('div');
        bound.className = 'tip-note';
        bound.textContent = L.errorNote;
        tip.append(bound);
      }
      chart.hover.setAttribute('visibility', 'visible');
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
    const showSelection = () => {
      const a = Math.min(drag.startX, drag.x);
      const b = Math.max(drag.startX, drag.x);
      chart.selection.setAttribute('x', a.toFixed(1));
      chart.selection.setAttribute('width', (b - a).toFixed(1));
      chart.selection.setAttribute('visibility', 'visible');
    };
    svg.addEventListener('pointermove', (ev) => {
      move(ev);
      if (drag && chart.layout) {
        const L = chart.layout;
        drag.x = Math.max(L.x0, Math.min(L.x1, toChartX(ev.clientX)));
        showSelection();
      }
    });
    svg.addEventListener('pointerdown', (ev) => {
      if (ev.target.closest('.chart-close')) return;
      move(ev);
      const L = chart.layout;
      if (!L || ev.pointerType !== 'mouse' || ev.button !== 0) return;
      const x = toChartX(ev.clientX);
      if (x < L.x0 || x > L.x1) return;
      drag = { startX: x, x };
      svg.setPointerCapture(ev.pointerId);
      ev.preventDefault(); // no text selection while dragging
    });
    const endDrag = (ev, apply) => {
      if (!drag) return;
      const d = drag;
      drag = null;
      if (chart.selection) chart.selection.setAttribute('visibility', 'hidden');
      const L = chart.layout;
      if (!apply || !L || Math.abs(d.x - d.startX) < 6) return;
      const t = (x) => L.from + ((x - L.x0) / (L.x1 - L.x0)) * (L.to - L.from);
      zoomTo(t(Math.min(d.startX, d.x)), t(Math.max(d.startX, d.x)));
    };
    svg.addEventListener('pointerup', (ev) => endDrag(ev, true));
    svg.addEventListener('pointercancel', (ev) => endDrag(ev, false));
    svg.addEventListener('keydown', (ev) => {
      if ((ev.key === 'Escape') && drag) endDrag(ev, false);
      if ((ev.key === 'Enter' || ev.key === ' ') && ev.target.closest('.chart-close')) removeView(chart.key);
    });
    svg.addEventListener('click', (ev) => {
      if (ev.target.closest('.chart-close')) removeView(chart.key);
    });
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

  // ---------------------------------------------------------------- time: zoom, pan, window

  function rangeSecs() {
    return Number((el.range.selectedOptions[0] || {}).dataset?.seconds || 0);
  }

  // The window shown: the fixed one, or the range ending now.
  function currentWindow() {
    if (state.fixed) return { from: state.fixed.from, to: state.fixed.to };
    const now = serverNow();
    return { from: now - rangeSecs(), to: now };
  }

  function pushHistory() {
    state.history.push({ fixed: state.fixed, live: state.live, tier: el.resolution.value, range: el.range.value });
    if (state.history.length > 50) state.history.shift();
  }

  // Shows a fixed window read at `tier` ("auto": the tier the server's rule picks).
  function setFixed(from, to, tier) {
    pushHistory();
    if (tier === 'auto' && !state.live) state.live = { tier: el.resolution.value, range: el.range.value };
    if (tier !== 'auto') state.live = null;
    state.fixed = { from: Math.floor(from), to: Math.ceil(to), tier };
    viewChanged();
  }

  // A dragged span: at least a few buckets of the finest tier, read with the auto rule (the
  // raw tier stays raw: auto never picks it).
  function zoomTo(from, to) {
    const finest = state.tiers.find((t) => !t.raw);
    const min = rawChosen() ? 60 : MIN_ZOOM_BUCKETS * (finest ? finest.res : 60);
    if (to - from < min) {
      const mid = (from + to) / 2;
      from = mid - min / 2;
      to = mid + min / 2;
    }
    // Whole minutes, unless the window is only minutes wide.
    if (to - from >= 600) {
      from = Math.floor(from / 60) * 60;
      to = Math.ceil(to / 60) * 60;
    }
    setFixed(from, to, rawChosen() ? queryTier() : 'auto');
  }

  // Half a window back (dir -1) or forward (+1); forward stops at now, and a window of the
  // chosen range read at the chosen tier that reaches now is live again.
  function pan(dir) {
    const { from, to } = currentWindow();
    const span = to - from;
    const now = serverNow();
    let f = from + (dir * span) / 2;
    let t = to + (dir * span) / 2;
    if (t >= now) {
      if (!state.fixed) return;
      if (state.fixed.tier === el.resolution.value && Math.abs(span - rangeSecs()) < 1) {
        goLive(true);
        return;
      }
      t = now;
      f = now - span;
    }
    setFixed(f, t, state.fixed ? state.fixed.tier : el.resolution.value);
  }

  // Back to the live view: the resolution and range it had before an auto-tier window.
  function restoreLive() {
    if (!state.live) return;
    el.resolution.value = state.live.tier;
    fillRanges(state.live.range);
    state.live = null;
  }

  function goLive(remember) {
    if (!state.fixed) return;
    if (remember) pushHistory();
    state.fixed = null;
    restoreLive();
    viewChanged();
  }

  function goBack() {
    const prev = state.history.pop();
    if (!prev) return goLive(false);
    state.fixed = prev.fixed;
    state.live = prev.live;
    if (prev.tier && prev.tier !== el.resolution.value) {
      el.resolution.value = prev.tier;
      fillRanges(prev.range);
    } else if (prev.range) {
      el.range.value = prev.range;
    }
    viewChanged();
  }

  function viewChanged() {
    syncDisplayForTier();
    syncTimeControls();
    writeHash();
    refreshSoon({ chartsOnly: true });
  }

  // What the user typed into the window inputs stays until they apply it or move the view
  // themselves: a live refresh landing meanwhile does not overwrite it.
  const editedTimes = new Set();
  for (const input of [el.timeFrom, el.timeTo]) {
    input.addEventListener('input', () => editedTimes.add(input));
  }

  function syncTimeControls({ fromRefresh = false } = {}) {
    const fixed = state.fixed;
    el.panFwd.disabled = !fixed;
    el.live.disabled = !fixed;
    el.zoomBack.disabled = !fixed && state.history.length === 0;
    el.range.classList.toggle('inactive', !!fixed);
    const auto = !!(fixed && fixed.tier === 'auto');
    el.resolution.classList.toggle('auto', auto);
    el.resolution.title = auto
      ? 'chosen by the auto rule for this window: the finest tier that fits it; pick one to use it instead'
      : 'bucket width: one of the configured tiers';
    const { from, to } = currentWindow();
    // A live window is shown to the minute; a fixed one as it is.
    const minute = (t) => (fixed ? t : Math.floor(t / 60) * 60);
    const shown = [
      [el.timeFrom, minute(Math.floor(from))],
      [el.timeTo, minute(Math.ceil(to))],
    ];
    for (const [input, t] of shown) {
      if (document.activeElement === input || (fromRefresh && editedTimes.has(input))) continue;
      input.value = fmtInput(t);
      editedTimes.delete(input);
    }
    el.viewInfo.dataset.mode = fixed ? 'fixed' : 'live';
    if (fixed) {
      el.viewInfo.textContent = `fixed window · ${auto ? 'auto tier' : fixed.tier}`;
    } else {
      const label = (el.range.selectedOptions[0] || {}).textContent || '';
      el.viewInfo.textContent = `live · last ${label}`;
    }
  }

  // In a fixed window read with `auto`, the resolution shows the tier the server chose.
  function showChosenTier() {
    if (!state.fixed || state.fixed.tier !== 'auto') return;
    for (const chart of state.charts.values()) {
      if (chart.data && chart.data.tier && tierByName(chart.data.tier)) {
        if (el.resolution.value !== chart.data.tier) {
          el.resolution.value = chart.data.tier;
          fillRanges(null);
          writeHash();
        }
        el.viewInfo.textContent = `fixed window · auto tier: ${chart.data.tier}`;
        return;
      }
    }
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
    } else if (el.range.value || state.fixed) {
      const q = {
        tier: queryTier(),
        range: el.range.value,
        display: el.display.value,
        fixed: state.fixed,
        window: currentWindow(),
      };
      await Promise.all([...state.charts.values()].map((chart) => loadChart(chart, q, gen)));
      if (gen === state.gen) showChosenTier();
    }
    if (gen === state.gen && !(state.fixed && state.fixed.tier === 'auto')) {
      syncTimeControls({ fromRefresh: true });
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
    if (state.fixed) {
      // The same window, at the tier picked.
      pushHistory();
      state.fixed = { ...state.fixed, tier: el.resolution.value };
      state.live = null;
    }
    viewChanged();
  });
  el.range.addEventListener('change', () => {
    // A range is a window ending now: a fixed window gives way to it.
    if (state.fixed) {
      pushHistory();
      state.fixed = null;
      state.live = null;
    }
    viewChanged();
  });
  el.display.addEventListener('change', () => {
    state.displayBeforeRaw = null;
    writeHash();
    refreshSoon({ chartsOnly: true });
  });
  document.getElementById('controls').addEventListener('submit', (e) => e.preventDefault());

  el.panBack.addEventListener('click', () => pan(-1));
  el.panFwd.addEventListener('click', () => pan(1));
  el.zoomBack.addEventListener('click', goBack);
  el.live.addEventListener('click', () => goLive(true));
  el.tz.addEventListener('change', () => {
    Z.utc = el.tz.value === 'utc';
    writeHash();
    syncTimeControls();
    redrawAll();
  });
  el.timeForm.addEventListener('submit', (e) => {
    e.preventDefault();
    const from = parseInput(el.timeFrom.value);
    const to = parseInput(el.timeTo.value);
    const form = `write YYYY-MM-DD HH:MM (${Z.name()}) or unix seconds`;
    let problem = '';
    if (!Number.isFinite(from)) problem = `from "${el.timeFrom.value}": ${form}`;
    else if (!Number.isFinite(to)) problem = `to "${el.timeTo.value}": ${form}`;
    else if (from >= to) problem = 'from must be before to';
    el.timeError.textContent = problem;
    el.timeError.hidden = !problem;
    el.timeFrom.setAttribute('aria-invalid', problem.startsWith('from') ? 'true' : 'false');
    el.timeTo.setAttribute('aria-invalid', problem.startsWith('to') ? 'true' : 'false');
    if (!problem) setFixed(from, to, rawChosen() ? queryTier() : 'auto');
  });

  let searchTimer = null;
  el.search.addEventListener('input', () => {
    renderSeriesList();
    syncCharts();
    clearTimeout(searchTimer);
    searchTimer = setTimeout(() => {
      writeHash();
      if (parseSearch(el.search.value).glob !== state.seriesGlob) refreshSoon({ series: true });
    }, 250);
  });

  el.seriesCombine.addEventListener('click', combineSelected);
  el.aggForm.addEventListener('submit', (e) => {
    e.preventDefault();
    const match = el.aggMatch.value.trim();
    if (!match) {
      el.aggMatch.focus();
      return;
    }
    const by = el.aggBy.value.split(/[\s,]+/).filter(Boolean).join(',');
    addAggregate({ kind: 'aggregate', agg: el.aggFn.value, match, by });
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
    state.views = [];
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
  if (wanted.views.length) {
    state.views = wanted.views;
    state.userTouched = true;
  }
  Z.utc = wanted.tz === 'utc';
  el.tz.value = Z.utc ? 'utc' : 'local';
  el.tz.options[0].textContent = `local (${LOCAL_ZONE})`;
  state.fixed = wanted.fixed;
  if (state.fixed && state.fixed.tier === 'auto' && wanted.tier) {
    state.live = { tier: wanted.tier, range: wanted.range };
  }
  syncTimeControls();
  run({ series: true });
})();
