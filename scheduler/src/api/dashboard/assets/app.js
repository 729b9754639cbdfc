// spillway dashboard: a client of the public API, written by hand (no build step, no framework).
//
// Rules this file keeps (the server's Content-Security-Policy enforces the first two):
// - No HTML is ever built from strings: every node comes from h()/s() below and every piece of data
//   goes in as a text node, so job names, event messages and log lines are shown, never run.
// - No inline code or styles; colours and layout come from app.css classes.
// - Data comes only from the documented API with the signed-in token; what a token may see is the
//   server's decision, never filtered (or widened) here.
'use strict';
(() => {
  const TOKEN_KEY = 'spillway.token';
  const THEME_KEY = 'spillway.theme';
  const STATES = ['pending', 'provisioning', 'running', 'migrating', 'succeeded', 'failed', 'cancelled'];
  const OPEN = new Set(['pending', 'provisioning', 'running', 'migrating']);
  const KINDS = ['training', 'batch', 'inference'];
  const LIST_LIMIT = 1000;
  const PAGE_SIZE = 25;
  const SERIES = 8; // colour-blind-safe series classes s0..s7 in app.css (Okabe-Ito), with dashes
  const SVGNS = 'http://www.w3.org/2000/svg';
  const HOUR = 3600000;

  // ---------- DOM helpers: the only way nodes are made ----------
  function setAttrs(el, attrs) {
    if (!attrs) return;
    for (const [k, v] of Object.entries(attrs)) {
      if (v === null || v === undefined || v === false) continue;
      if (k === 'on') for (const [ev, fn] of Object.entries(v)) el.addEventListener(ev, fn);
      else if (k === 'text') el.textContent = String(v);
      else if (k === 'data') for (const [dk, dv] of Object.entries(v)) el.setAttribute('data-' + dk, String(dv));
      else el.setAttribute(k, v === true ? '' : String(v));
    }
  }
  function append(el, kids) {
    for (const k of kids.flat(Infinity)) {
      if (k === null || k === undefined || k === false) continue;
      el.append(k instanceof Node ? k : document.createTextNode(String(k)));
    }
    return el;
  }
  function h(tag, attrs, ...kids) {
    const el = document.createElement(tag);
    setAttrs(el, attrs);
    return append(el, kids);
  }
  function s(tag, attrs, ...kids) {
    const el = document.createElementNS(SVGNS, tag);
    setAttrs(el, attrs);
    return append(el, kids);
  }
  // Replaces an element's children; arrays are flattened, null and false skipped.
  function fill(el, ...kids) {
    el.replaceChildren();
    return append(el, kids);
  }
  const $ = (sel, root = document) => root.querySelector(sel);

  // ---------- formatting ----------
  const usdFmt = new Intl.NumberFormat('en-US', { style: 'currency', currency: 'USD' });
  const usd = (n) => (n === null || n === undefined || !isFinite(n) ? '—' : usdFmt.format(Math.abs(n) < 0.005 ? 0 : n));
  const usdh = (n) => usd(n) + '/h';
  // An attempt's priority; a mixed fleet (#22) names both parts' VMs.
  const prio = (a) => (a.regular ? 'mixed: ' + a.regular.vms + ' regular + ' + (a.vms - a.regular.vms) + ' spot' : a.priority);
  const num = (n, d = 1) => (n === null || n === undefined || !isFinite(n) ? '—' : Number(n).toFixed(d).replace(/\.0+$/, ''));
  function dur(ms) {
    if (ms === null || ms === undefined || !isFinite(ms)) return '—';
    ms = Math.max(0, ms);
    const m = Math.floor(ms / 60000);
    if (ms < 60000) return Math.round(ms / 1000) + ' s';
    if (m < 60) return m + ' min';
    const hh = Math.floor(m / 60);
    if (hh < 48) return hh + ' h ' + String(m % 60).padStart(2, '0') + ' min';
    return Math.floor(hh / 24) + ' d ' + (hh % 24) + ' h';
  }
  const two = (n) => String(n).padStart(2, '0');
  const MONTHS = ['Jan', 'Feb', 'Mar', 'Apr', 'May', 'Jun', 'Jul', 'Aug', 'Sep', 'Oct', 'Nov', 'Dec'];
  function clockTime(ms, seconds) {
    const d = new Date(ms);
    return two(d.getHours()) + ':' + two(d.getMinutes()) + (seconds ? ':' + two(d.getSeconds()) : '');
  }
  function dayLabel(ms) {
    const d = new Date(ms);
    return MONTHS[d.getMonth()] + ' ' + d.getDate();
  }
  function when(ms) {
    if (!ms) return '—';
    const now = clock.now();
    return (Math.abs(now - ms) < 20 * HOUR ? '' : dayLabel(ms) + ' ') + clockTime(ms);
  }
  const plural = (n, word) => n + ' ' + word + (n === 1 ? '' : 's');

  // ---------- the server's clock ----------
  // Every *_ms the API returns is on the server's clock, which under a simulated cloud runs
  // `speedup` times faster than real time. Answers carry it (`clock`: kind, speedup, now_ms); in
  // between, it is extrapolated at that speed (or, when the server does not say, the speed
  // measured between two readings).
  const clock = {
    base: null,
    first: null,
    rate: 1,
    known: false,
    simulated: false,
    observe(c) {
      if (!c || typeof c.now_ms !== 'number') return;
      const p = performance.now();
      const ms = c.now_ms;
      this.simulated = c.kind === 'simulated';
      if (c.kind === 'wall') {
        this.rate = 1;
        this.known = true;
      } else if (typeof c.speedup === 'number') {
        this.rate = c.speedup;
        this.known = true;
      } else if (!this.first || p - this.first.p > 600000) this.first = { ms, p };
      else if (p - this.first.p > 1500) this.rate = Math.max(0, (ms - this.first.ms) / (p - this.first.p));
      this.base = { ms, p };
    },
    now() {
      return this.base ? this.base.ms + (performance.now() - this.base.p) * this.rate : Date.now();
    },
    // An event stamped `ms` has happened: now is at least that.
    atLeast(ms) {
      if (this.base && ms > this.now()) this.base = { ms, p: performance.now() };
    },
  };
  async function syncClock() {
    try {
      S.who = await api('/v1/whoami');
      clock.observe(S.who.clock);
    } catch (e) {
      /* api() shows the banner */
    }
    renderStatus();
  }

  // ---------- state ----------
  const S = {
    token: null,
    who: null,
    view: null,
    viewName: null,
    lastSeq: null,
    live: false,
    lastEventAt: null,
    events: [], // newest last, for the activity feed
    sse: null,
    timers: [],
    logsRoute: false,
  };

  // ---------- API ----------
  class ApiError extends Error {
    constructor(status, message) {
      super(message);
      this.status = status;
    }
  }
  async function api(path) {
    let res;
    try {
      res = await fetch(path, { headers: { Authorization: 'Bearer ' + S.token, Accept: 'application/json' }, cache: 'no-store' });
    } catch (e) {
      banner('Cannot reach the spillway server; retrying.');
      throw new ApiError(0, 'cannot reach the server');
    }
    const type = res.headers.get('content-type') || '';
    const body = type.includes('json') ? await res.json().catch(() => null) : await res.text().catch(() => '');
    if (res.status === 401) {
      signOut('The server refused this token (unknown or revoked). Sign in again.');
      throw new ApiError(401, 'unauthorized');
    }
    if (!res.ok) {
      const msg = body && body.error ? body.error : 'HTTP ' + res.status;
      throw new ApiError(res.status, msg);
    }
    banner(null);
    if (body && body.clock) clock.observe(body.clock);
    return body;
  }
  const q = (params) => {
    const u = new URLSearchParams();
    for (const [k, v] of Object.entries(params)) if (v !== '' && v !== null && v !== undefined) u.set(k, v);
    const t = u.toString();
    return t ? '?' + t : '';
  };

  function banner(msg) {
    const b = $('#banner');
    if (!msg) {
      b.hidden = true;
      return;
    }
    b.hidden = false;
    b.textContent = msg;
  }

  // ---------- sign-in ----------
  function takeTokenFromFragment() {
    const m = location.hash.match(/^#token=([^&]*)/);
    if (!m) return false;
    let t = '';
    try {
      t = decodeURIComponent(m[1]).trim();
    } catch (e) {
      t = '';
    }
    // Out of the address bar and the history at once: the fragment never went to the server.
    history.replaceState(null, '', location.pathname + location.search + '#/jobs');
    if (t) sessionStorage.setItem(TOKEN_KEY, t);
    return true;
  }

  function showSignIn(message) {
    stopLive();
    $('#nav').hidden = true;
    $('#signout').hidden = true;
    fill($('#status'));
    const input = h('input', { type: 'password', id: 'token-input', name: 'token', autocomplete: 'off', spellcheck: 'false', placeholder: 'spw_…', required: true });
    const form = h(
      'form',
      {
        class: 'card signin',
        id: 'signin',
        on: {
          submit: (e) => {
            e.preventDefault();
            const t = input.value.trim();
            if (!t) return;
            sessionStorage.setItem(TOKEN_KEY, t);
            start();
          },
        },
      },
      h('h1', { text: 'Sign in' }),
      h('p', null, 'Paste an API token. The admin token is in ', h('code', { text: '<data-dir>/admin.token' }), '; ', h('code', { text: 'spillway dashboard-url' }), ' prints a link that signs you in. The token is kept in this tab only (session storage).'),
      message ? h('p', { class: 'error', id: 'signin-error', text: message }) : null,
      h('label', { for: 'token-input', text: 'Token' }),
      input,
      h('button', { type: 'submit', class: 'primary', text: 'Sign in' })
    );
    fill($('#main'), form);
    input.focus();
  }

  function signOut(message) {
    sessionStorage.removeItem(TOKEN_KEY);
    S.token = null;
    S.who = null;
    if (S.view && S.view.leave) S.view.leave();
    S.view = null;
    showSignIn(message || 'Signed out.');
  }

  async function start() {
    S.token = sessionStorage.getItem(TOKEN_KEY);
    if (!S.token) return showSignIn(null);
    try {
      S.who = await api('/v1/whoami');
    } catch (e) {
      if (e.status !== 401) showSignIn('Cannot sign in: ' + e.message);
      return;
    }
    clock.observe(S.who.clock);
    $('#nav').hidden = false;
    $('#signout').hidden = false;
    try {
      const doc = await api('/openapi.json');
      S.logsRoute = !!(doc && doc.paths && doc.paths['/v1/jobs/{id}/logs']);
    } catch (e) {
      S.logsRoute = false;
    }
    renderStatus();
    startLive();
    route();
  }

  // ---------- live: the event stream and refreshes ----------
  // EventSource cannot send an Authorization header, so the stream is read through fetch.
  async function follow(gen) {
    let backoff = 500;
    while (S.token && S.sse && gen === S.sse.gen) {
      const ctl = new AbortController();
      S.sse.ctl = ctl;
      try {
        const headers = { Authorization: 'Bearer ' + S.token, Accept: 'text/event-stream' };
        let path = '/v1/events';
        if (S.lastSeq !== null) headers['Last-Event-ID'] = S.lastSeq;
        else if (S.who && !S.who.tenant) {
          // The last few events for the feed. A tenant-bound token's positions are opaque
          // cursors, not sequence numbers: it starts with the next event.
          const health = await fetch('/healthz', { cache: 'no-store' }).then((r) => r.json());
          path += '?from=' + Math.max(1, (health.last_event_seq || 0) - 40);
        }
        const res = await fetch(path, { headers, signal: ctl.signal, cache: 'no-store' });
        if (res.status === 401) {
          signOut('The server refused this token (unknown or revoked). Sign in again.');
          return;
        }
        if (!res.ok || !res.body) throw new Error('HTTP ' + res.status);
        setLive(true);
        backoff = 500;
        const reader = res.body.pipeThrough(new TextDecoderStream()).getReader();
        let buf = '';
        for (;;) {
          const { value, done } = await reader.read();
          if (done) break;
          buf += value;
          let m;
          while ((m = buf.match(/\r?\n\r?\n/))) {
            frame(buf.slice(0, m.index));
            buf = buf.slice(m.index + m[0].length);
          }
        }
      } catch (e) {
        if (ctl.signal.aborted) return;
      }
      setLive(false);
      await new Promise((r) => setTimeout(r, backoff));
      backoff = Math.min(backoff * 2, 8000);
    }
  }

  function frame(text) {
    let id = null;
    let kind = 'message';
    const data = [];
    for (const line of text.split(/\r?\n/)) {
      if (!line || line.startsWith(':')) continue;
      const i = line.indexOf(':');
      const field = i < 0 ? line : line.slice(0, i);
      const value = i < 0 ? '' : line.slice(i + 1).replace(/^ /, '');
      if (field === 'id') id = value;
      else if (field === 'event') kind = value;
      else if (field === 'data') data.push(value);
    }
    if (id !== null && /^\d+$/.test(id)) S.lastSeq = id;
    if (!data.length) return;
    let ev;
    try {
      ev = JSON.parse(data.join('\n'));
    } catch (e) {
      return;
    }
    ev.kind = ev.kind || kind;
    if (ev.at_ms) clock.atLeast(ev.at_ms);
    S.events.push(ev);
    if (S.events.length > 200) S.events.shift();
    S.lastEventAt = performance.now();
    if (S.view && S.view.onEvent) S.view.onEvent(ev);
    else scheduleRefresh(400);
  }

  function startLive() {
    stopLive();
    S.sse = { gen: Math.random(), ctl: null };
    S.lastSeq = null;
    S.events = [];
    follow(S.sse.gen);
    S.timers.push(setInterval(() => scheduleRefresh(0), 3000));
    S.timers.push(setInterval(syncClock, 5000));
    // Two early readings measure how fast the server's clock runs (its --speedup).
    S.timers.push(setTimeout(syncClock, 1600), setTimeout(syncClock, 3200));
    S.timers.push(setInterval(renderStatus, 1000));
  }

  function stopLive() {
    if (S.sse && S.sse.ctl) S.sse.ctl.abort();
    S.sse = null;
    for (const t of S.timers) {
      clearInterval(t);
      clearTimeout(t);
    }
    S.timers = [];
    setLive(false);
  }

  function setLive(on) {
    S.live = on;
    renderStatus();
  }

  // The status line's nodes are made once and updated in place (it changes every second).
  let statusEls = null;
  function renderStatus() {
    const el = $('#status');
    if (!S.who) {
      statusEls = null;
      return fill(el);
    }
    if (!statusEls || !el.contains(statusEls.live)) {
      statusEls = {
        live: h('span', { id: 'live' }),
        time: h('span', { class: 'muted', title: 'The server clock: every time shown is on it' }),
        who: h('span', { class: 'who', id: 'who' }),
      };
      fill(el, statusEls.live, statusEls.time, statusEls.who);
    }
    const speed = clock.simulated || clock.rate > 1.5 ? ' · simulated, ' + Math.round(clock.rate) + '× real time' : '';
    statusEls.live.className = 'live ' + (S.live ? 'on' : 'off');
    statusEls.live.title = S.live ? 'Following /v1/events' : 'Reconnecting to /v1/events';
    statusEls.live.textContent = S.live ? 'live' : 'reconnecting';
    statusEls.time.textContent = 'server time ' + clockTime(clock.now(), true) + speed;
    statusEls.who.title = 'token ' + S.who.token_id;
    statusEls.who.textContent = S.who.role + (S.who.tenant ? ' · tenant ' + S.who.tenant : ' · all tenants');
  }

  let refreshTimer = null;
  let refreshing = false;
  let again = false;
  function scheduleRefresh(ms) {
    if (refreshTimer) return;
    refreshTimer = setTimeout(() => {
      refreshTimer = null;
      refreshNow();
    }, ms);
  }
  async function refreshNow() {
    if (!S.view || !S.token) return;
    if (refreshing) {
      again = true;
      return;
    }
    refreshing = true;
    const view = S.view;
    try {
      if (!view.minInterval || !view.lastAt || performance.now() - view.lastAt >= view.minInterval) {
        view.lastAt = performance.now();
        await view.refresh();
      }
    } catch (e) {
      if (e.status && e.status !== 401) banner(e.message);
    } finally {
      refreshing = false;
      if (again) {
        again = false;
        scheduleRefresh(200);
      }
    }
  }

  // ---------- routing ----------
  function parseRoute() {
    const raw = location.hash.replace(/^#/, '') || '/jobs';
    const [path, query] = raw.split('?');
    const parts = path.split('/').filter(Boolean);
    let arg = null;
    if (parts.length > 1) {
      try {
        arg = decodeURIComponent(parts.slice(1).join('/'));
      } catch (e) {
        arg = parts.slice(1).join('/');
      }
    }
    return { name: parts[0] || 'jobs', arg, params: new URLSearchParams(query || '') };
  }

  function route() {
    if (takeTokenFromFragment()) return start();
    if (!S.token) return;
    const r = parseRoute();
    if (S.view && S.view.leave) S.view.leave();
    const make = VIEWS[r.name] || VIEWS.jobs;
    const main = $('#main');
    fill(main);
    S.viewName = VIEWS[r.name] ? r.name : 'jobs';
    for (const a of document.querySelectorAll('#nav a')) {
      const current = a.getAttribute('data-view') === ({ job: 'jobs', pipeline: 'pipelines' }[S.viewName] || S.viewName);
      if (current) a.setAttribute('aria-current', 'page');
      else a.removeAttribute('aria-current');
    }
    S.view = make(main, r);
    refreshNow();
  }

  // ---------- shared pieces ----------
  const badge = (state) => h('span', { class: 'badge st-' + state, data: { state } }, state);
  const jobLink = (id, name) => h('a', { href: '#/job/' + encodeURIComponent(id), class: 'joblink' }, name || id);
  function section(title, ...kids) {
    return h('section', { class: 'card' }, h('h2', { text: title }), ...kids);
  }
  function table(cls, head, rows, empty) {
    if (!rows.length) return h('p', { class: 'muted empty', text: empty });
    return h('div', { class: 'scroll' }, h('table', { class: cls }, h('thead', null, h('tr', null, head.map((c) => h('th', { scope: 'col', class: c.num ? 'num' : null, text: c.label || c })))), h('tbody', null, rows)));
  }
  const td = (v, cls) => h('td', { class: cls || null }, v);
  function wantedGpus(j) {
    if (typeof j.wanted_gpus === 'number') return j.wanted_gpus;
    const r = j.spec.replicas;
    return j.spec.gpus * (r && r.desired ? r.desired : 1);
  }
  function waitedMs(j) {
    const end = j.first_running_at_ms || (OPEN.has(j.state) ? clock.now() : j.finished_at_ms || clock.now());
    return end - j.submitted_at_ms;
  }
  function why(j) {
    const r = j.pending_reasons || [];
    if (r.length) return r[0] + (r.length > 1 ? ' (+' + (r.length - 1) + ' more)' : '');
    if (j.state === 'pending') return 'waiting for the next round';
    if (!OPEN.has(j.state)) return j.end_reason || '';
    if (j.state === 'migrating' && j.last_failure) return 'moving: ' + j.last_failure;
    return '';
  }
  const widthOf = (el, fallback) => Math.max(280, Math.floor((el && el.clientWidth) || fallback || 800));

  // Nice axis steps for numbers and times.
  function niceTicks(max, count) {
    if (!(max > 0)) return [0, 1];
    const raw = max / count;
    const mag = Math.pow(10, Math.floor(Math.log10(raw)));
    const step = [1, 2, 2.5, 5, 10].map((m) => m * mag).find((x) => x >= raw) || 10 * mag;
    const out = [];
    for (let v = 0; v <= max + step * 1e-9; v += step) out.push(Number(v.toPrecision(12)));
    if (out[out.length - 1] < max) out.push(Number((out[out.length - 1] + step).toPrecision(12)));
    return out;
  }
  const TIME_STEPS = [1, 2, 5, 10, 15, 30, 60, 120, 180, 360, 720, 1440, 2880, 10080].map((m) => m * 60000);
  function timeTicks(t0, t1, count) {
    const step = TIME_STEPS.find((st) => (t1 - t0) / st <= count) || TIME_STEPS[TIME_STEPS.length - 1];
    const offset = new Date(t0).getTimezoneOffset() * 60000;
    const out = [];
    for (let t = Math.ceil((t0 - offset) / step) * step + offset; t <= t1; t += step) out.push(t);
    return { ticks: out, label: (t) => (t1 - t0 > 36 * HOUR && step >= 24 * HOUR ? dayLabel(t) : t1 - t0 > 36 * HOUR ? dayLabel(t) + ' ' + clockTime(t) : clockTime(t)) };
  }

  function legend(items) {
    return h('ul', { class: 'legend' }, items.map((it) => h('li', null, h('span', { class: 'swatch ' + it.cls }), it.label)));
  }

  // A line chart: series of [t, v] points over a time axis; units on both axes.
  function lineChart(container, { series, t0, t1, yLabel, yFormat, step }) {
    const W = widthOf(container, 800);
    const H = 220;
    const m = { l: 64, r: 12, t: 12, b: 38 };
    const iw = W - m.l - m.r;
    const ih = H - m.t - m.b;
    let ymax = 0;
    for (const se of series) for (const [, v] of se.points) ymax = Math.max(ymax, v);
    const yt = niceTicks(ymax || 1, 4);
    const ytop = yt[yt.length - 1];
    const x = (t) => m.l + ((t - t0) / Math.max(1, t1 - t0)) * iw;
    const y = (v) => m.t + ih - (v / ytop) * ih;
    const svg = s('svg', { class: 'chart', width: W, height: H, viewBox: '0 0 ' + W + ' ' + H, role: 'img', 'aria-label': yLabel + ' over time' });
    for (const v of yt) {
      svg.append(s('line', { class: 'grid', x1: m.l, x2: W - m.r, y1: y(v), y2: y(v) }));
      svg.append(s('text', { class: 'tick', x: m.l - 6, y: y(v) + 4, 'text-anchor': 'end' }, yFormat(v)));
    }
    const tt = timeTicks(t0, t1, Math.max(2, Math.floor(iw / 90)));
    for (const t of tt.ticks) {
      svg.append(s('line', { class: 'grid', x1: x(t), x2: x(t), y1: m.t, y2: m.t + ih }));
      svg.append(s('text', { class: 'tick', x: x(t), y: H - m.b + 16, 'text-anchor': 'middle' }, tt.label(t)));
    }
    svg.append(s('line', { class: 'axis', x1: m.l, x2: W - m.r, y1: m.t + ih, y2: m.t + ih }));
    svg.append(s('line', { class: 'axis', x1: m.l, x2: m.l, y1: m.t, y2: m.t + ih }));
    svg.append(s('text', { class: 'axislabel', x: m.l + iw / 2, y: H - 4, 'text-anchor': 'middle' }, 'server time (your time zone)'));
    svg.append(s('text', { class: 'axislabel', x: 12, y: m.t + ih / 2, 'text-anchor': 'middle', transform: 'rotate(-90 12 ' + (m.t + ih / 2) + ')' }, yLabel));
    series.forEach((se, i) => {
      if (!se.points.length) return;
      let d = '';
      se.points.forEach(([t, v], k) => {
        if (k === 0) d += 'M' + x(t).toFixed(1) + ' ' + y(v).toFixed(1);
        else if (step) d += 'H' + x(t).toFixed(1) + 'V' + y(v).toFixed(1);
        else d += 'L' + x(t).toFixed(1) + ' ' + y(v).toFixed(1);
      });
      if (step) d += 'H' + x(t1).toFixed(1);
      svg.append(s('path', { class: 'line s' + (i % SERIES), d }, s('title', null, se.name)));
      const [lt, lv] = se.points[se.points.length - 1];
      svg.append(s('circle', { class: 'dotpt s' + (i % SERIES), cx: x(lt), cy: y(lv), r: 3 }, s('title', null, se.name + ' ' + se.last + ' at ' + when(lt))));
    });
    fill(container, svg, legend(series.map((se, i) => ({ cls: 'series s' + (i % SERIES), label: se.name + ' ' + se.last }))));
  }

  // ---------- Jobs ----------
  const COLUMNS = [
    { key: 'name', label: 'Job', get: (j) => j.spec.name.toLowerCase(), cell: (j) => [jobLink(j.id, j.spec.name), h('div', { class: 'sub mono', text: j.id })] },
    { key: 'state', label: 'State', get: (j) => STATES.indexOf(j.state), cell: (j) => badge(j.state) },
    { key: 'tenant', label: 'Tenant', get: (j) => j.spec.tenant, cell: (j) => j.spec.tenant },
    { key: 'kind', label: 'Kind', get: (j) => j.spec.kind, cell: (j) => j.spec.kind },
    { key: 'gpus', label: 'GPUs', num: true, get: wantedGpus, cell: (j) => String(wantedGpus(j)) },
    {
      key: 'placement',
      label: 'Region / size / priority',
      get: (j) => (j.placement ? j.placement.region + ' ' + j.placement.size + ' ' + prio(j.placement) : '~'),
      cell: (j) => (j.placement ? [h('div', { text: j.placement.region }), h('div', { class: 'sub', title: j.placement.size, text: j.placement.vms + ' × ' + j.placement.size.replace(/^Standard_/, '') + ' · ' + prio(j.placement) + (j.placement.state === 'running' || j.placement.state === 'provisioning' ? '' : ' (' + j.placement.state + ')') })] : h('span', { class: 'muted', text: '—' })),
    },
    { key: 'cost', label: 'Cost (USD)', num: true, get: (j) => j.cost_usd, cell: (j) => usd(j.cost_usd) },
    { key: 'wait', label: 'Waited', num: true, get: waitedMs, cell: (j) => dur(waitedMs(j)) },
    { key: 'submitted', label: 'Submitted', num: true, get: (j) => j.submitted_at_ms, cell: (j) => when(j.submitted_at_ms) },
    { key: 'why', label: 'Why it waits / how it ended', get: why, cell: (j) => h('span', { class: 'why', text: why(j) }) },
  ];

  function JobsView(root, r) {
    const st = {
      state: STATES.includes(r.params.get('state')) ? r.params.get('state') : '',
      tenant: r.params.get('tenant') || '',
      kind: KINDS.includes(r.params.get('kind')) ? r.params.get('kind') : '',
      text: r.params.get('q') || '',
      sort: COLUMNS.some((c) => c.key === r.params.get('sort')) ? r.params.get('sort') : 'submitted',
      dir: r.params.get('dir') === 'asc' ? 1 : -1,
      page: Math.max(0, parseInt(r.params.get('page') || '0', 10) || 0),
      list: null,
      counts: null,
      // Pages of LIST_LIMIT jobs read from the server, newest first (more once "older" is asked for).
      chunks: 1,
    };
    const bound = S.who && S.who.tenant;
    const remember = () => {
      const hash = '#/jobs' + q({ state: st.state, tenant: bound ? '' : st.tenant, kind: st.kind, q: st.text, sort: st.sort === 'submitted' ? '' : st.sort, dir: st.dir === 1 ? 'asc' : '', page: st.page || '' });
      history.replaceState(null, '', hash);
    };
    const counts = h('div', { class: 'counts', id: 'state-counts' });
    const stateSel = h('select', { id: 'filter-state', name: 'state' }, h('option', { value: '', text: 'every state' }), STATES.map((x) => h('option', { value: x, text: x })));
    stateSel.value = st.state;
    const kindSel = h('select', { id: 'filter-kind', name: 'kind' }, h('option', { value: '', text: 'every kind' }), KINDS.map((x) => h('option', { value: x, text: x })));
    kindSel.value = st.kind;
    const tenantIn = bound ? null : h('input', { id: 'filter-tenant', name: 'tenant', type: 'search', placeholder: 'every tenant', value: st.tenant, autocomplete: 'off', spellcheck: 'false' });
    const textIn = h('input', { id: 'filter-text', name: 'q', type: 'search', placeholder: 'name, id, region, size…', value: st.text, autocomplete: 'off', spellcheck: 'false' });
    const wrap = h('div', { id: 'jobs-table' });
    const pager = h('div', { class: 'pager', id: 'pager' });
    const feed = h('ol', { class: 'feed', id: 'feed' });
    let tenantTimer = null;
    stateSel.addEventListener('change', () => {
      st.state = stateSel.value;
      st.page = 0;
      st.chunks = 1;
      remember();
      refresh();
    });
    kindSel.addEventListener('change', () => {
      st.kind = kindSel.value;
      st.page = 0;
      remember();
      draw();
    });
    textIn.addEventListener('input', () => {
      st.text = textIn.value;
      st.page = 0;
      remember();
      draw();
    });
    if (tenantIn)
      tenantIn.addEventListener('input', () => {
        clearTimeout(tenantTimer);
        tenantTimer = setTimeout(() => {
          st.tenant = tenantIn.value.trim();
          st.page = 0;
          st.chunks = 1;
          remember();
          refresh();
        }, 300);
      });
    root.append(
      h('div', { class: 'viewhead' }, h('h1', { text: 'Jobs' }), counts),
      h(
        'div',
        { class: 'layout-main-side' },
        h(
          'section',
          { class: 'card' },
          h(
            'form',
            { class: 'filters', on: { submit: (e) => e.preventDefault() } },
            h('label', null, 'State ', stateSel),
            h('label', null, 'Kind ', kindSel),
            bound ? h('span', { class: 'fixed', text: 'tenant ' + bound }) : h('label', null, 'Tenant ', tenantIn),
            h('label', { class: 'grow' }, 'Search ', textIn)
          ),
          wrap,
          pager
        ),
        h('section', { class: 'card side' }, h('h2', { text: 'Latest events' }), feed)
      )
    );

    function visible() {
      if (!st.list) return [];
      const needle = st.text.trim().toLowerCase();
      let rows = st.list.jobs.filter((j) => (!st.kind || j.spec.kind === st.kind));
      if (needle)
        rows = rows.filter((j) => [j.id, j.spec.name, j.spec.tenant, j.placement && j.placement.region, j.placement && j.placement.size].some((v) => v && String(v).toLowerCase().includes(needle)));
      const col = COLUMNS.find((c) => c.key === st.sort) || COLUMNS[0];
      rows = rows.map((j) => [col.get(j), j]);
      rows.sort((a, b) => (a[0] < b[0] ? -1 : a[0] > b[0] ? 1 : a[1].id < b[1].id ? -1 : 1) * st.dir);
      return rows.map((x) => x[1]);
    }

    function draw() {
      if (!st.list) return;
      const rows = visible();
      const pages = Math.max(1, Math.ceil(rows.length / PAGE_SIZE));
      st.page = Math.min(st.page, pages - 1);
      const shown = rows.slice(st.page * PAGE_SIZE, (st.page + 1) * PAGE_SIZE);
      const head = h(
        'tr',
        null,
        COLUMNS.map((c) =>
          h(
            'th',
            { scope: 'col', class: (c.num ? 'num ' : '') + 'c-' + c.key, 'aria-sort': st.sort === c.key ? (st.dir === 1 ? 'ascending' : 'descending') : 'none' },
            h(
              'button',
              {
                type: 'button',
                class: 'sort',
                data: { sort: c.key },
                on: {
                  click: () => {
                    if (st.sort === c.key) st.dir = -st.dir;
                    else {
                      st.sort = c.key;
                      st.dir = c.num ? -1 : 1;
                    }
                    remember();
                    draw();
                  },
                },
              },
              c.label,
              st.sort === c.key ? (st.dir === 1 ? ' ▲' : ' ▼') : ''
            )
          )
        )
      );
      const body = shown.map((j) =>
        h(
          'tr',
          { class: 'row', data: { id: j.id, state: j.state, tenant: j.spec.tenant }, on: { click: (e) => { if (!e.target.closest('a')) location.hash = '#/job/' + encodeURIComponent(j.id); } } },
          COLUMNS.map((c) => td(c.cell(j), (c.num ? 'num ' : '') + 'c-' + c.key))
        )
      );
      fill(wrap,
        body.length
          ? h('div', { class: 'scroll' }, h('table', { class: 'jobs' }, h('thead', null, head), h('tbody', null, body)))
          : h('p', { class: 'muted empty', id: 'no-jobs', text: st.list.jobs.length ? 'No job matches these filters.' : 'No jobs' + (st.state ? ' ' + st.state : '') + ' yet.' })
      );
      const from = rows.length ? st.page * PAGE_SIZE + 1 : 0;
      fill(pager,
        h('button', { type: 'button', class: 'ghost', disabled: st.page === 0, on: { click: () => { st.page--; remember(); draw(); } } }, '‹ Newer'),
        h('span', { class: 'muted', id: 'page-info' }, from + '–' + (st.page * PAGE_SIZE + shown.length) + ' of ' + plural(rows.length, 'job') + (st.list.truncated ? ' (the newest ' + st.list.jobs.length + ' of ' + st.list.total + ' read)' : '')),
        h('button', { type: 'button', class: 'ghost', disabled: st.page >= pages - 1, on: { click: () => { st.page++; remember(); draw(); } } }, 'Older ›'),
        st.list.next
          ? h('button', { type: 'button', class: 'ghost', id: 'load-older', on: { click: readOlder } }, 'Read ' + Math.min(LIST_LIMIT, st.list.total - st.list.jobs.length) + ' older jobs')
          : null
      );
    }

    // Past the newest LIST_LIMIT jobs: the server's `next` cursor reads the next older page, which
    // joins the table (sorting and searching cover every job read).
    async function readOlder() {
      st.chunks++;
      st.sig = null;
      await refresh();
    }

    // The newest st.chunks pages, each from the one before's `next`: a refresh reads the same
    // span of history again, so jobs submitted meanwhile leave no gap between pages.
    async function readList(tenant) {
      const first = await api('/v1/jobs' + q({ limit: LIST_LIMIT, state: st.state, tenant }));
      let page = first;
      let jobs = first.jobs;
      for (let i = 1; i < st.chunks && page.next; i++) {
        page = await api('/v1/jobs' + q({ limit: LIST_LIMIT, state: st.state, tenant, cursor: page.next }));
        jobs = page.jobs.concat(jobs);
      }
      return { jobs, total: first.total, truncated: !!page.next, next: page.next, clock: first.clock };
    }

    function drawCounts() {
      if (!st.counts) return;
      const total = STATES.reduce((a, x) => a + st.counts[x], 0);
      fill(counts,
        h('button', { type: 'button', class: 'count' + (st.state === '' ? ' on' : ''), data: { state: 'all' }, on: { click: () => { st.state = ''; stateSel.value = ''; st.page = 0; remember(); refresh(); } } }, h('b', { text: String(total) }), ' all'),
        STATES.map((x) =>
          h('button', { type: 'button', class: 'count' + (st.state === x ? ' on' : ''), data: { state: x, count: st.counts[x] }, on: { click: () => { st.state = x; stateSel.value = x; st.page = 0; remember(); refresh(); } } }, h('span', { class: 'dot st-' + x }), h('b', { text: String(st.counts[x]) }), ' ' + x)
        )
      );
    }

    const names = new Map();
    function drawFeed() {
      if (st.list) for (const j of st.list.jobs) names.set(j.id, j.spec.name);
      const items = S.events.slice(-12).reverse();
      fill(feed,
        ...(items.length
          ? items.map((e) => h('li', null, h('span', { class: 'muted mono', text: clockTime(e.at_ms) }), ' ', h('span', { class: 'kind k-' + e.kind, text: e.kind }), ' ', e.job_id ? jobLink(e.job_id, names.get(e.job_id) || e.job_id) : null, h('div', { class: 'msg', text: e.message })))
          : [h('li', { class: 'muted', text: 'Waiting for events…' })])
      );
    }

    let countsKey = null;
    let countsAt = 0;
    async function refresh() {
      const tenant = bound ? '' : st.tenant;
      // Counts cost one request per state: read at most every 10 s (and when the tenant changes).
      const fresh = countsKey !== tenant || performance.now() - countsAt > 10000;
      const [list, ...n] = await Promise.all([readList(tenant), ...(fresh ? STATES.map((x) => api('/v1/jobs' + q({ limit: 1, state: x, tenant }))) : [])]);
      let counted = st.counts;
      if (fresh) {
        counted = {};
        STATES.forEach((x, i) => (counted[x] = n[i].total));
        countsKey = tenant;
        countsAt = performance.now();
      }
      // Redrawn only when something changed (or every 10 s, for the waiting times): a table
      // rebuilt under the pointer would swallow clicks.
      const sig = JSON.stringify([list, counted]);
      if (sig === st.sig && performance.now() - st.drawnAt < 10000) return drawFeed();
      st.sig = sig;
      st.drawnAt = performance.now();
      st.list = list;
      st.counts = counted;
      draw();
      drawCounts();
      drawFeed();
    }
    drawFeed();
    return {
      refresh,
      minInterval: 1000,
      onEvent: () => {
        drawFeed();
        scheduleRefresh(500);
      },
    };
  }

  // ---------- One job ----------
  const MARKED = { evicted: 'evicted', preemption_notice: 'preemption notice', failover: 'failover', migrating: 'migration', provisioning_failed: 'failed attempt', restarted: 'restarted in place', deadline_choice: 'deadline choice', cancelled: 'cancelled', failed: 'failed', succeeded: 'succeeded' };

  function attemptEnd(a, attempts, now) {
    if (a.ended_at_ms) return a.ended_at_ms;
    if (a.state === 'provisioning' || a.state === 'running') return now;
    const next = attempts.find((b) => b.number > a.number);
    return next ? next.started_at_ms : a.running_since_ms || a.started_at_ms;
  }

  function timeline(container, job, attempts, events, now) {
    const W = widthOf(container, 900);
    const narrow = W < 560;
    const labelW = narrow ? 96 : 190;
    const rowH = 28;
    const t0 = job.submitted_at_ms;
    const t1 = Math.max(job.finished_at_ms || now, t0 + 60000);
    const pad = (t1 - t0) * 0.02;
    const a0 = t0 - pad;
    const a1 = t1 + pad;
    const m = { t: 8, b: 40, r: 10 };
    const rows = 2 + attempts.length;
    const H = m.t + rows * rowH + m.b;
    const iw = W - labelW - m.r;
    const x = (t) => labelW + ((t - a0) / (a1 - a0)) * iw;
    const svg = s('svg', { class: 'timeline', id: 'timeline', width: W, height: H, viewBox: '0 0 ' + W + ' ' + H, role: 'img', 'aria-label': 'Timeline of the job and its attempts' });
    const tt = timeTicks(a0, a1, Math.max(2, Math.floor(iw / 90)));
    for (const t of tt.ticks) {
      svg.append(s('line', { class: 'grid', x1: x(t), x2: x(t), y1: m.t, y2: m.t + rows * rowH }));
      svg.append(s('text', { class: 'tick', x: x(t), y: m.t + rows * rowH + 16, 'text-anchor': 'middle' }, tt.label(t)));
    }
    svg.append(s('text', { class: 'axislabel', x: labelW + iw / 2, y: H - 4, 'text-anchor': 'middle' }, 'server time (your time zone) · span ' + dur(t1 - t0)));
    const seg = (row, from, to, cls, title, extra) => {
      const w = Math.max(2, x(to) - x(from));
      svg.append(s('rect', Object.assign({ class: 'seg ' + cls, x: x(from), y: m.t + row * rowH + 5, width: w, height: rowH - 10, rx: 3 }, extra || {}), s('title', null, title + ': ' + when(from) + ' – ' + when(to) + ' (' + dur(to - from) + ')')));
    };
    const label = (row, main, sub) => {
      svg.append(s('text', { class: 'rowlabel', x: 4, y: m.t + row * rowH + (sub && !narrow ? 13 : 18) }, main));
      if (sub && !narrow) svg.append(s('text', { class: 'rowsub', x: 4, y: m.t + row * rowH + 24 }, sub));
    };
    // Row 0: events as markers.
    label(0, 'events');
    for (const e of events) {
      if (!MARKED[e.kind]) continue;
      const cx = x(e.at_ms);
      const cy = m.t + rowH / 2;
      svg.append(s('path', { class: 'marker k-' + e.kind, d: 'M' + cx + ' ' + (cy - 7) + 'L' + (cx + 6) + ' ' + cy + 'L' + cx + ' ' + (cy + 7) + 'L' + (cx - 6) + ' ' + cy + 'Z', data: { kind: e.kind } }, s('title', null, MARKED[e.kind] + ' at ' + when(e.at_ms) + ': ' + e.message)));
    }
    // Row 1: the job: pending wherever no attempt was under way.
    label(1, 'job', job.state);
    const spans = attempts.map((a) => [a.started_at_ms, attemptEnd(a, attempts, now)]).sort((p, q2) => p[0] - q2[0]);
    let cursor = t0;
    const jobEnd = job.finished_at_ms || now;
    for (const [from, to] of spans) {
      if (from > cursor) seg(1, cursor, Math.min(from, jobEnd), 'seg-pending', 'pending', { data: { phase: 'pending' } });
      cursor = Math.max(cursor, to);
    }
    if (cursor < jobEnd && OPEN.has(job.state)) seg(1, cursor, jobEnd, 'seg-pending', 'pending', { data: { phase: 'pending' } });
    // One row per attempt: provisioning, then running; a failed one ends in a cross.
    attempts.forEach((a, i) => {
      const row = 2 + i;
      const end = attemptEnd(a, attempts, now);
      label(row, '#' + a.number + ' ' + a.region, a.vms + '× ' + a.size.replace(/^Standard_/, '') + ' ' + prio(a));
      const runFrom = a.running_since_ms;
      seg(row, a.started_at_ms, runFrom || end, 'seg-provisioning', 'attempt ' + a.number + ' provisioning', { data: { phase: 'provisioning', attempt: a.number } });
      if (runFrom) seg(row, runFrom, end, 'seg-running' + (a.priority === 'spot' ? ' spot' : ''), 'attempt ' + a.number + ' running (' + a.running_vms + '/' + a.vms + ' VMs)', { data: { phase: 'running', attempt: a.number } });
      if (a.state === 'failed') {
        const cx = x(end);
        const cy = m.t + row * rowH + rowH / 2;
        svg.append(s('path', { class: 'cross', d: 'M' + (cx - 5) + ' ' + (cy - 5) + 'L' + (cx + 5) + ' ' + (cy + 5) + 'M' + (cx + 5) + ' ' + (cy - 5) + 'L' + (cx - 5) + ' ' + (cy + 5) }, s('title', null, 'failed: ' + (a.failure || 'unknown reason'))));
      }
    });
    if (OPEN.has(job.state)) svg.append(s('line', { class: 'now', x1: x(now), x2: x(now), y1: m.t, y2: m.t + rows * rowH }, s('title', null, 'now')));
    fill(container,
      svg,
      legend([
        { cls: 'seg-pending', label: 'pending' },
        { cls: 'seg-provisioning', label: 'provisioning' },
        { cls: 'seg-running', label: 'running (regular)' },
        { cls: 'seg-running spot', label: 'running (spot, striped)' },
        { cls: 'cross-swatch', label: 'failed attempt' },
        { cls: 'marker-swatch', label: 'event: eviction, failover, migration, …' },
      ])
    );
  }

  function specTable(spec) {
    const rows = Object.entries(spec)
      .filter(([, v]) => v !== null && v !== undefined && !(Array.isArray(v) && !v.length))
      .map(([k, v]) => h('tr', null, h('th', { scope: 'row', text: k }), h('td', { class: 'mono', text: Array.isArray(v) ? v.join(', ') : typeof v === 'object' ? JSON.stringify(v) : String(v) })));
    return h('table', { class: 'kv' }, h('tbody', null, rows));
  }

  // A job's output, from GET /v1/jobs/{id}/logs: pages of JSON, or with "follow" its new lines as
  // server-sent events (`line`, then `end` once the job has ended), resumed from the last line's
  // cursor after a break. Lines are text nodes; at most MAX_LOG_LINES are kept on the page.
  const MAX_LOG_LINES = 5000;
  function LogsPanel(jobId) {
    const out = h('div', { class: 'logs', id: 'logs', role: 'log', 'aria-live': 'off' });
    const followBox = h('input', { type: 'checkbox', id: 'logs-follow', checked: true });
    const note = h('p', { class: 'muted', id: 'logs-note' });
    const more = h('button', { type: 'button', class: 'ghost', id: 'logs-more', hidden: true }, 'Load more');
    const el = h('section', { class: 'card' }, h('div', { class: 'cardhead' }, h('h2', { text: 'Logs' }), h('label', { class: 'inline' }, followBox, ' follow')), note, out, more);
    let ctl = null;
    let cursor = null;
    let state = 'idle'; // idle | open | ended
    let dropped = 0;
    const add = (e) => {
      const tag = 'a' + e.attempt + ' r' + e.rank + (e.restart ? ' s' + e.restart : '');
      out.append(h('div', { class: 'logline' + (e.stream === 'stderr' ? ' stderr' : ''), data: { attempt: e.attempt, rank: e.rank } }, h('span', { class: 'logtag', title: 'attempt ' + e.attempt + ', rank ' + e.rank + ', start ' + e.restart + ', ' + e.stream + ', ' + when(e.at_ms), text: tag }), ' ', e.text));
      while (out.childNodes.length > MAX_LOG_LINES) {
        out.firstChild.remove();
        dropped++;
      }
      cursor = e.cursor || cursor;
    };
    const stick = () => {
      if (followBox.checked) out.scrollTop = out.scrollHeight;
    };
    const say = (text) => {
      note.textContent = text + (dropped ? ' (the first ' + dropped + ' lines are no longer shown)' : '');
    };
    async function page() {
      more.hidden = true;
      const body = await api('/v1/jobs/' + encodeURIComponent(jobId) + '/logs' + q({ from: cursor, limit: 2000 }));
      for (const e of body.lines) add(e);
      cursor = body.next;
      more.hidden = !body.more;
      say(out.childNodes.length ? 'The output so far.' : 'No output yet.');
    }
    async function follow() {
      ctl = new AbortController();
      const mine = ctl;
      let backoff = 500;
      while (!mine.signal.aborted && state === 'open') {
        try {
          const headers = { Authorization: 'Bearer ' + S.token, Accept: 'text/event-stream' };
          if (cursor) headers['Last-Event-ID'] = cursor;
          const res = await fetch('/v1/jobs/' + encodeURIComponent(jobId) + '/logs?follow=true', { headers, signal: mine.signal, cache: 'no-store' });
          if (!res.ok || !res.body) {
            const b = await res.json().catch(() => null);
            say('No logs: ' + (b && b.error ? b.error : 'HTTP ' + res.status));
            return;
          }
          say('Following the output.');
          backoff = 500;
          const reader = res.body.pipeThrough(new TextDecoderStream()).getReader();
          let buf = '';
          for (;;) {
            const { value, done } = await reader.read();
            if (done) break;
            buf += value;
            let m;
            while ((m = buf.match(/\r?\n\r?\n/))) {
              const block = buf.slice(0, m.index);
              buf = buf.slice(m.index + m[0].length);
              let kind = 'message';
              const data = [];
              for (const line of block.split(/\r?\n/)) {
                if (line.startsWith('event:')) kind = line.slice(6).trim();
                else if (line.startsWith('data:')) data.push(line.slice(5).replace(/^ /, ''));
              }
              if (!data.length) continue;
              let v = null;
              try {
                v = JSON.parse(data.join('\n'));
              } catch (e) {
                continue;
              }
              if (kind === 'line') add(v);
              else if (kind === 'end') {
                state = 'ended';
                say('The job ended (' + v.state + '); this is all of its output.');
              }
            }
            stick();
          }
        } catch (e) {
          if (mine.signal.aborted) return;
        }
        if (state !== 'open') return;
        say('The log stream broke; reconnecting.');
        await new Promise((r) => setTimeout(r, backoff));
        backoff = Math.min(backoff * 2, 8000);
      }
    }
    function open() {
      if (ctl) ctl.abort();
      ctl = null;
      fill(out);
      cursor = null;
      dropped = 0;
      if (followBox.checked) {
        state = 'open';
        follow();
      } else {
        state = 'paged';
        page().catch((e) => say('Cannot read the logs: ' + e.message));
      }
    }
    followBox.addEventListener('change', () => state !== 'idle' && open());
    more.addEventListener('click', () => page().catch((e) => say('Cannot read the logs: ' + e.message)));
    return {
      el,
      update(j) {
        if (!S.logsRoute) {
          say(j.spec.run ? 'Logs are not available: this server has no log route (GET /v1/jobs/{id}/logs).' : 'This job runs no command, so it has no logs.');
          return;
        }
        if (!j.spec.run) {
          say('This job runs no command, so it has no logs.');
          return;
        }
        if (state === 'idle') open();
      },
      leave() {
        state = 'idle';
        if (ctl) ctl.abort();
      },
    };
  }

  function nodesTable(nodes) {
    const util = (n) => (n.gpu_utilization && n.gpu_utilization.length ? Math.round(n.gpu_utilization.reduce((a, g) => a + g.utilization_percent, 0) / n.gpu_utilization.length) + ' %' : '—');
    const exit = (n) => (n.exit_code !== undefined ? 'exit ' + n.exit_code : n.exit_signal !== undefined ? 'signal ' + n.exit_signal : '') + (n.exit_reason ? ' (' + n.exit_reason + ')' : '');
    return table(
      'nodes',
      ['Attempt', 'Rank', 'Host', 'Phase', 'Last exit', { label: 'GPU use', num: true }, 'Last heartbeat', { label: 'Log (KiB)', num: true }],
      nodes.map((n) =>
        h('tr', { data: { attempt: n.attempt, rank: n.rank } }, td(String(n.attempt)), td(String(n.rank)), td([h('div', { class: 'mono', text: n.hostname || n.vm_name }), h('div', { class: 'sub mono', text: n.private_ip || '' })]), td([n.phase, n.lost ? ' (lost)' : '', n.notice ? ' · notice ' + n.notice : '']), td(exit(n), 'why'), td(util(n), 'num'), td(when(n.last_heartbeat_ms)), td(num(n.log_bytes / 1024, 1) + (n.log_truncated ? ' (cap)' : ''), 'num'))
      ),
      'No rank has reported yet.'
    );
  }

  function JobView(root, r) {
    const id = r.arg || '';
    const head = h('div', { class: 'viewhead' }, h('h1', { text: id }));
    const summary = h('div', { class: 'cards', id: 'job-summary' });
    const tl = h('div', { class: 'tlwrap', id: 'timeline-wrap' });
    const spec = h('div');
    const atts = h('div', { id: 'attempts' });
    const evs = h('div', { id: 'job-events' });
    const logs = LogsPanel(id);
    const nodesEl = h('div', { id: 'nodes' });
    const nodesCard = section('Nodes (ranks running the work)', nodesEl);
    nodesCard.hidden = true;
    root.append(
      h('p', null, h('a', { href: '#/jobs', class: 'back', text: '‹ All jobs' })),
      head,
      summary,
      section('Timeline', tl),
      h('div', { class: 'two' }, section('Attempts', atts), section('Spec', spec)),
      nodesCard,
      section('Events', evs),
      logs.el
    );
    async function refresh() {
      let v;
      try {
        v = await api('/v1/jobs/' + encodeURIComponent(id));
      } catch (e) {
        if (e.status === 404) {
          fill(head, h('h1', { text: 'No job ' + id }));
          fill(summary, h('p', { class: 'muted', id: 'job-missing', text: 'There is no such job, or this token may not see it.' }));
          return;
        }
        throw e;
      }
      const j = v.job;
      const now = clock.now();
      fill(head, h('h1', { id: 'job-name', text: j.spec.name }), badge(j.state), h('span', { class: 'muted mono', text: j.id }), h('span', { class: 'muted', text: j.spec.tenant + ' · ' + j.spec.kind + ' · priority ' + (j.spec.priority || 1) }));
      const rate = (v.placements || []).reduce((a, p) => a + (p.state === 'running' ? p.running_vms * p.price_per_hour : 0), 0);
      const d = j.spec.duration_hours;
      const pct = d ? Math.min(100, (100 * j.progress_hours) / d) : null;
      const card = (title, big, sub, extra) => h('div', { class: 'card stat' }, h('div', { class: 'muted', text: title }), h('div', { class: 'big', text: big }), sub ? h('div', { class: 'sub', text: sub }) : null, extra || null);
      const waiting = (j.pending_reasons || []).length ? h('div', { class: 'card reasons', id: 'pending-reasons' }, h('div', { class: 'muted', text: 'Why it waits' }), h('ul', null, j.pending_reasons.map((x) => h('li', { text: x })))) : null;
      fill(summary,
        card('GPUs', String(wantedGpus(j)), ((j.spec.gang ?? j.spec.kind === 'training') ? 'gang' : 'splittable') + ' · spot ' + (j.spec.spot || (j.spec.kind === 'batch' ? 'allowed' : 'never'))),
        card('Cost so far', usd(j.cost_usd), OPEN.has(j.state) ? 'now ' + usdh(rate) + (j.spec.budget ? ' · budget ' + usd(j.spec.budget) : '') : j.spec.budget ? 'budget ' + usd(j.spec.budget) : null),
        card(
          'Progress',
          pct === null ? num(j.progress_hours, 2) + ' h' : Math.floor(pct) + ' %',
          d ? num(j.progress_hours, 2) + ' h of ' + num(d, 2) + ' h of work' : 'no duration given',
          pct === null ? null : s('svg', { class: 'progress', width: '100%', height: 8, role: 'img', 'aria-label': Math.floor(pct) + ' percent done' }, s('rect', { class: 'track', x: 0, y: 0, width: '100%', height: 8, rx: 4 }), s('rect', { class: 'fill', x: 0, y: 0, width: pct + '%', height: 8, rx: 4 }))
        ),
        card('Waited', dur(waitedMs(j)), j.first_running_at_ms ? 'first ran ' + when(j.first_running_at_ms) : 'not run yet'),
        card('Attempts', String(j.attempts), plural(j.failovers, 'failover') + ' · ' + plural(j.evictions, 'eviction') + (j.lost_work_gpu_hours ? ' · ' + num(j.lost_work_gpu_hours, 2) + ' GPU-h lost' : '')),
        waiting,
        j.last_failure ? h('div', { class: 'card stat wide' }, h('div', { class: 'muted', text: 'Last failure' }), h('p', { class: 'why', text: j.last_failure })) : null,
        j.end_reason ? h('div', { class: 'card stat wide' }, h('div', { class: 'muted', text: 'Ended' }), h('p', { text: j.end_reason })) : null
      );
      timeline(tl, j, v.attempts, v.events, now);
      fill(spec, specTable(j.spec));
      fill(atts,
        table(
          'attempts',
          ['#', 'Region', 'Size', 'Priority', { label: 'VMs', num: true }, { label: 'GPUs', num: true }, { label: 'USD/h per VM', num: true }, { label: 'Cost (USD)', num: true }, 'State', 'Started', 'Running since', 'Ended', 'Failure'],
          v.attempts.map((a) =>
            h('tr', { data: { attempt: a.number, state: a.state } }, td(String(a.number)), td(a.region), td(a.size, 'mono'), td(prio(a)), td(a.running_vms + '/' + a.vms, 'num'), td(String(a.gpus), 'num'), td(num(a.price_per_hour, 3), 'num'), td(usd(a.cost_usd), 'num'), td(h('span', { class: 'badge at-' + a.state, text: a.state })), td(when(a.started_at_ms)), td(when(a.running_since_ms)), td(when(a.ended_at_ms)), td(a.failure || '', 'why'))
          ),
          'No attempt yet.'
        )
      );
      fill(evs,
        table(
          'events',
          ['Time', 'Kind', 'What happened'],
          v.events
            .slice()
            .reverse()
            .map((e) => h('tr', { data: { seq: e.seq, kind: e.kind } }, td(when(e.at_ms), 'mono'), td(h('span', { class: 'kind k-' + e.kind, text: e.kind })), td(e.message, 'msg'))),
          'No events.'
        )
      );
      nodesCard.hidden = !(v.nodes && v.nodes.length);
      if (v.nodes && v.nodes.length) fill(nodesEl, nodesTable(v.nodes));
      logs.update(j);
    }
    return {
      refresh,
      leave: logs.leave,
      onEvent: (e) => {
        if (e.job_id === id) scheduleRefresh(150);
      },
    };
  }

  // ---------- Capacity ----------
  function poolRank(p) {
    const k = p.toLowerCase();
    return k === 'cores' ? 1 : k === 'lowprioritycores' ? 2 : 0;
  }

  // A pool's use as the token may see it: an admin (or unbound viewer) sees spillway's (running and
  // in flight) and everyone else's; a tenant-bound token sees its tenant's, and the rest as others.
  function poolUse(p) {
    if (p.used_by_us === undefined || p.used_by_us === null) {
      const mine = p.used_by_tenant || 0;
      return { us: mine, inFlight: 0, others: Math.max(0, p.limit - p.free - mine), tenant: true };
    }
    return { us: p.used_by_us, inFlight: p.in_flight || 0, others: p.used_by_others || 0, tenant: false };
  }

  function poolBar(p, W) {
    const u = poolUse(p);
    const runningUs = Math.max(0, u.us - u.inFlight);
    const total = Math.max(p.limit, u.others + u.us, 1);
    const H = 36;
    const bw = W - 2;
    const x = (v) => 1 + (v / total) * bw;
    const svg = s('svg', { class: 'poolbar', width: W, height: H, viewBox: '0 0 ' + W + ' ' + H, role: 'img', 'aria-label': p.pool + ': ' + u.us + ' of ' + p.limit + ' vCPUs used by ' + (u.tenant ? 'your tenant' : 'spillway') + ', ' + u.others + ' by others, ' + p.free + ' free' });
    let at = 0;
    const part = (v, cls, what) => {
      if (v <= 0) return;
      svg.append(s('rect', { class: 'seg ' + cls, x: x(at), y: 2, width: Math.max(1, x(at + v) - x(at)), height: 14, data: { part: cls } }, s('title', null, what + ': ' + v + ' vCPUs')));
      at += v;
    };
    part(runningUs, 'q-us', u.tenant ? 'used by your tenant' : 'used by spillway (running)');
    part(u.inFlight, 'q-inflight', 'in flight (provisioning)');
    part(u.others, 'q-others', u.tenant ? 'used by others (other tenants, or outside spillway)' : 'used by others');
    svg.append(s('rect', { class: 'q-limit', x: 1, y: 2, width: x(p.limit) - 1, height: 14 }));
    for (const v of niceTicks(total, Math.max(2, Math.floor(W / 110)))) {
      if (v > total) break;
      svg.append(s('line', { class: 'axis', x1: x(v), x2: x(v), y1: 16, y2: 20 }));
      svg.append(s('text', { class: 'tick', x: Math.min(Math.max(x(v), 8), W - 8), y: 31, 'text-anchor': v === 0 ? 'start' : x(v) > W - 30 ? 'end' : 'middle' }, v + (v === 0 ? ' vCPUs' : '')));
    }
    return svg;
  }

  function breakerBadge(b) {
    if (!b || b.state === 'closed') return h('span', { class: 'badge br-closed', data: { breaker: 'closed' }, text: 'healthy (breaker closed)' });
    if (b.state === 'open') return h('span', { class: 'badge br-open', data: { breaker: 'open' }, text: 'shunned: breaker open, ' + dur(b.until_ms - clock.now()) + ' left' });
    return h('span', { class: 'badge br-half', data: { breaker: 'half_open' }, text: 'probing: breaker half-open' });
  }

  function CapacityView(root) {
    const regionsEl = h('div', { class: 'regions', id: 'regions' });
    const blockedEl = h('div', { id: 'blocked' });
    root.append(
      h('div', { class: 'viewhead' }, h('h1', { text: 'Capacity' }), h('span', { class: 'muted', text: 'quota per region and pool, in vCPUs, as the control loop sees it' })),
      legend(
        S.who && S.who.tenant
          ? [
              { cls: 'q-us', label: 'used by tenant ' + S.who.tenant },
              { cls: 'q-others', label: 'used by others (other tenants, or outside spillway)' },
              { cls: 'q-free', label: 'free' },
            ]
          : [
              { cls: 'q-us', label: 'used by spillway (running)' },
              { cls: 'q-inflight', label: 'in flight (provisioning)' },
              { cls: 'q-others', label: 'used by others' },
              { cls: 'q-free', label: 'free' },
            ]
      ),
      regionsEl,
      section('Blocked offers', h('p', { class: 'muted', text: 'Offers that failed recently; the scheduler plans around them until the block ends.' }), blockedEl)
    );
    const openIdle = new Set();
    let sig = null;
    let drawnAt = 0;
    async function refresh() {
      const cap = await api('/v1/capacity');
      // Redrawn when it changed (or every 10 s, for the times left): tooltips stay put.
      const now0 = JSON.stringify(cap);
      if (now0 === sig && performance.now() - drawnAt < 10000) return;
      sig = now0;
      drawnAt = performance.now();
      const regions = new Map();
      const get = (r) => {
        if (!regions.has(r)) regions.set(r, { pools: [], health: null, blocked: 0 });
        return regions.get(r);
      };
      for (const p of cap.pools || []) get(p.region).pools.push(p);
      for (const r of cap.regions || []) get(r.region).health = r.breaker;
      for (const b of cap.blocked_offers || []) get(b.region).blocked++;
      const now = clock.now();
      const bars = [];
      fill(regionsEl,
        ...[...regions.entries()]
          .sort((a, b) => (a[0] < b[0] ? -1 : 1))
          .map(([name, r]) => {
            const pools = r.pools.slice().sort((a, b) => poolRank(a.pool) - poolRank(b.pool) || (a.pool < b.pool ? -1 : 1));
            const readAt = pools.length ? Math.max(...pools.map((p) => p.refreshed_at_ms)) : 0;
            const poolRow = (p) =>
              h(
                'div',
                { class: 'pool', data: { region: p.region, pool: p.pool, limit: p.limit, us: poolUse(p).us, inflight: poolUse(p).inFlight, others: poolUse(p).others, free: p.free } },
                h('div', { class: 'poolhead' }, h('span', { class: 'mono', text: p.pool }), h('span', { class: 'muted', text: (poolUse(p).tenant ? 'yours ' : 'spillway ') + poolUse(p).us + (poolUse(p).inFlight ? ' (' + poolUse(p).inFlight + ' in flight)' : '') + ' · others ' + poolUse(p).others + ' · free ' + p.free + ' of ' + p.limit + ' vCPUs' })),
                (() => {
                  const slot = h('div', { class: 'barslot' });
                  slot.pool = p;
                  bars.push([slot, p]);
                  return slot;
                })()
              );
            // The region-wide pools and every pool in use first; untouched families folded away.
            const busy = (p) => poolRank(p.pool) > 0 || poolUse(p).us > 0 || poolUse(p).others > 0;
            const idle = pools.filter((p) => !busy(p));
            return h(
              'section',
              { class: 'card region', data: { region: name } },
              h('div', { class: 'cardhead' }, h('h2', { text: name }), breakerBadge(r.health)),
              h('p', { class: 'muted' }, readAt ? 'quota read ' + dur(now - readAt) + ' ago' : 'quota not read yet', r.blocked ? ' · ' + plural(r.blocked, 'blocked offer') : ''),
              pools.filter(busy).map(poolRow),
              idle.length
                ? h(
                    'details',
                    {
                      class: 'idle',
                      open: openIdle.has(name),
                      on: {
                        toggle: (e) => {
                          if (e.target.open) openIdle.add(name);
                          else openIdle.delete(name);
                          // Bars drawn while folded had no width to measure.
                          for (const slot of e.target.querySelectorAll('.barslot')) if (slot.pool) fill(slot, poolBar(slot.pool, widthOf(slot, 500)));
                        },
                      },
                    },
                    h('summary', { text: plural(idle.length, 'more family pool') + ', unused (all free)' }),
                    idle.map(poolRow)
                  )
                : null
            );
          })
      );
      // Drawn once the cards are laid out, at the width each card gives them.
      for (const [slot, p] of bars) fill(slot, poolBar(p, widthOf(slot, 500)));
      if (!regions.size) fill(regionsEl, h('p', { class: 'muted', text: 'No quota read yet: the control loop reads it in its first rounds.' }));
      fill(blockedEl,
        table(
          'blocked',
          ['Region', 'Scope', 'Class', 'Reason', 'Since', 'Time left'],
          (cap.blocked_offers || []).map((b) =>
            h('tr', { data: { region: b.region, class: b.class } }, td(b.region), td([b.size || (b.family ? 'family ' + b.family : 'every size'), b.priority ? ' · ' + b.priority : ' · both tiers', b.zone ? ' · zone ' + b.zone : ''].join(''), 'mono'), td(h('span', { class: 'badge cl-' + b.class, text: b.class })), td(b.reason, 'why'), td(when(b.since_ms)), td(dur(b.until_ms - now) + ' (until ' + when(b.until_ms) + ')', 'num'))
          ),
          'No offer is blocked.'
        )
      );
    }
    return { refresh, onEvent: () => scheduleRefresh(300) };
  }

  // ---------- Cost ----------
  function CostView(root, r) {
    let hours = [6, 24, 168, 720].includes(Number(r.params.get('hours'))) ? Number(r.params.get('hours')) : 24;
    const sel = h('select', { id: 'cost-window' }, [[6, '6 hours'], [24, '24 hours'], [168, '7 days'], [720, '30 days']].map(([v, l]) => h('option', { value: v, text: l })));
    sel.value = String(hours);
    sel.addEventListener('change', () => {
      hours = Number(sel.value);
      history.replaceState(null, '', '#/cost' + q({ hours: hours === 24 ? '' : hours }));
      refreshNow();
    });
    const tenantsEl = h('div', { id: 'tenants' });
    const regionsEl = h('div', { id: 'spend-regions' });
    const charts = {};
    for (const k of ['tenantSpent', 'tenantRate', 'regionSpent', 'regionRate']) charts[k] = h('div', { class: 'chartwrap', id: 'chart-' + k });
    root.append(
      h('div', { class: 'viewhead' }, h('h1', { text: 'Cost' }), h('label', null, 'Window ', sel)),
      section('Tenants', tenantsEl),
      h('div', { class: 'two' }, section('Spend by tenant (USD, cumulative)', charts.tenantSpent), section('Spend rate by tenant (USD per hour)', charts.tenantRate)),
      h('div', { class: 'two' }, section('Spend by region (USD, cumulative)', charts.regionSpent), section('Spend rate by region (USD per hour)', charts.regionRate)),
      section('Now, per tenant and region', regionsEl),
      h('p', { class: 'muted', id: 'cost-note' })
    );
    function series(history, key, field) {
      const names = new Set();
      for (const smp of history) for (const p of smp.series) names.add(p[key]);
      return [...names].sort().map((name) => {
        const points = history.map((smp) => [smp.at_ms, smp.series.filter((p) => p[key] === name).reduce((a, p) => a + p[field], 0)]);
        const lastV = points.length ? points[points.length - 1][1] : 0;
        return { name, points, last: field === 'usd_per_hour' ? usdh(lastV) : usd(lastV) };
      });
    }
    async function refresh() {
      const v = await api('/v1/spend' + q({ hours }));
      fill(tenantsEl,
        table(
          'tenants',
          ['Tenant', { label: 'Spending now (USD/h)', num: true }, { label: 'Spent (USD)', num: true }, { label: 'Budget (USD)', num: true }, { label: 'Left (USD)', num: true }, 'Budget used'],
          v.tenants.map((t) => {
            const pct = t.budget_usd ? Math.min(100, (100 * t.spent_usd) / t.budget_usd) : null;
            return h(
              'tr',
              { data: { tenant: t.tenant } },
              td(t.tenant),
              td(usdh(t.usd_per_hour), 'num'),
              td(usd(t.spent_usd), 'num'),
              td(t.budget_usd === null || t.budget_usd === undefined ? 'no budget' : usd(t.budget_usd), 'num'),
              td(t.left_usd === null || t.left_usd === undefined ? '—' : usd(t.left_usd), 'num' + (t.left_usd !== null && t.left_usd < 0 ? ' over' : '')),
              td(pct === null ? '' : [s('svg', { class: 'budget', width: 120, height: 10, role: 'img', 'aria-label': Math.round(pct) + ' percent of the budget used' }, s('rect', { class: 'track', x: 0, y: 0, width: 120, height: 10, rx: 3 }), s('rect', { class: 'fill' + (pct >= 90 ? ' hot' : ''), x: 0, y: 0, width: (120 * pct) / 100, height: 10, rx: 3 })), ' ' + Math.round(pct) + ' %'])
            );
          }),
          'No tenant has spent anything yet.'
        )
      );
      const t1 = v.now_ms;
      const t0 = t1 - v.window_hours * HOUR;
      const hist = v.history;
      const opts = (yLabel, yFormat, stepped) => ({ t0: hist.length ? Math.max(t0, Math.min(hist[0].at_ms, t1 - HOUR)) : t0, t1, yLabel, yFormat, step: stepped });
      const money = (x) => '$' + (x >= 1000 ? num(x / 1000, 1) + 'k' : num(x, x < 10 ? 2 : 0));
      lineChart(charts.tenantSpent, Object.assign({ series: series(hist, 'tenant', 'spent_usd') }, opts('USD', money, false)));
      lineChart(charts.tenantRate, Object.assign({ series: series(hist, 'tenant', 'usd_per_hour') }, opts('USD per hour', money, true)));
      lineChart(charts.regionSpent, Object.assign({ series: series(hist, 'region', 'spent_usd') }, opts('USD', money, false)));
      lineChart(charts.regionRate, Object.assign({ series: series(hist, 'region', 'usd_per_hour') }, opts('USD per hour', money, true)));
      fill(regionsEl,
        table(
          'spendregions',
          ['Tenant', 'Region', { label: 'Spending now (USD/h)', num: true }, { label: 'Spent (USD)', num: true }],
          v.regions.map((p) => h('tr', { data: { tenant: p.tenant, region: p.region } }, td(p.tenant), td(p.region), td(usdh(p.usd_per_hour), 'num'), td(usd(p.spent_usd), 'num'))),
          'Nothing spent in any region yet.'
        )
      );
      $('#cost-note').textContent = 'Sampled by the server every ' + dur(v.sample_every_ms) + ' of server time (' + plural(hist.length, 'sample') + ' in this window); per-region spend counts from when the server began recording. Spent per tenant is the scheduler’s own account.';
    }
    return { refresh, minInterval: 2500, onEvent: () => scheduleRefresh(1500) };
  }

  // The first reasons, the rest folded (the solver lists one per offer it ruled out).
  function reasonList(reasons) {
    const li = (x) => h('li', { text: x });
    if (reasons.length <= 5) return h('ul', { class: 'reasons' }, reasons.map(li));
    return [h('ul', { class: 'reasons' }, reasons.slice(0, 4).map(li)), h('details', { class: 'more' }, h('summary', { text: plural(reasons.length - 4, 'more reason') }), h('ul', { class: 'reasons' }, reasons.slice(4).map(li)))];
  }

  // ---------- Plan ----------
  function PlanView(root) {
    const head = h('p', { class: 'muted', id: 'plan-summary', text: 'Asking the solver…' });
    const placeEl = h('div', { id: 'plan-placements' });
    const waitEl = h('div', { id: 'plan-waiting' });
    root.append(
      h('div', { class: 'viewhead' }, h('h1', { text: 'Plan' }), h('span', { class: 'muted', text: 'what the solver would do with the open work now (nothing is provisioned by looking)' })),
      head,
      section('Would place now', placeEl),
      section('Waiting, and why', waitEl)
    );
    const part = (p) => ({ id: p.job, note: p.part === 'min' ? ' (up to minimum replicas)' : p.part === 'extra' ? ' (extra replicas)' : '' });
    let lastSig = null;
    async function refresh() {
      const [plan, ...lists] = await Promise.all([api('/v1/plan'), ...['pending', 'provisioning', 'running', 'migrating'].map((x) => api('/v1/jobs' + q({ state: x, limit: LIST_LIMIT })))]);
      const jobs = new Map();
      for (const l of lists) for (const j of l.jobs) jobs.set(j.id, j);
      // Redrawn only when the answer changed, so folded reasons stay as the reader left them.
      const sig = JSON.stringify([plan.placements.map((p) => [p.job, p.part, p.region, p.size, p.vms]), plan.unplaced, plan.solver, [...jobs.values()].map((j) => [j.id, j.state, j.pending_reasons])]);
      if (sig === lastSig) return;
      lastSig = sig;
      const name = (id) => (jobs.get(id) ? jobs.get(id).spec.name : id);
      head.textContent =
        'Solver ' + plan.solver + (plan.solver.includes('optimal') ? '' : ' · ' + (plan.optimal ? 'proven optimal' : 'gap ' + num(plan.gap * 100, 2) + ' %')) + ' · solved in ' + num(plan.solve_ms, 1) + ' ms · ' + plural(plan.placements.length, 'placement') + ', expected cost ' + usd(plan.expected_cost) + ' · ' + plural(plan.unplaced.length, 'job') + ' waiting';
      fill(placeEl,
        table(
          'placements',
          ['Job', 'Region', 'Size', 'Priority', { label: 'VMs', num: true }, { label: 'GPUs', num: true }, { label: 'USD/h', num: true }, { label: 'Expected cost (USD)', num: true }],
          plan.placements.map((p) => {
            const pp = part(p);
            return h('tr', { data: { job: pp.id } }, td([jobLink(pp.id, name(pp.id)), pp.note]), td(p.region), td(p.size, 'mono'), td(p.priority), td(String(p.vms), 'num'), td(String(p.gpus), 'num'), td(usdh(p.price_per_hour), 'num'), td(usd(p.expected_cost), 'num'));
          }),
          'Nothing to place: every open job is placed, or none can be.'
        )
      );
      const waiting = plan.unplaced.map((u) => ({ ...part(u), reasons: u.reasons }));
      for (const j of jobs.values()) if (j.state === 'pending' && !plan.placements.some((p) => p.job === j.id) && !waiting.some((w) => w.id === j.id)) waiting.push({ id: j.id, note: '', reasons: j.pending_reasons && j.pending_reasons.length ? j.pending_reasons : ['placed at the next round'] });
      fill(waitEl,
        table(
          'waiting',
          ['Job', 'State', 'Why it waits'],
          waiting.map((w) => h('tr', { data: { job: w.id } }, td([jobLink(w.id, name(w.id)), w.note]), td(jobs.get(w.id) ? badge(jobs.get(w.id).state) : ''), td(reasonList(w.reasons)))),
          'No job waits.'
        )
      );
    }
    return { refresh, minInterval: 4000, onEvent: () => scheduleRefresh(2000) };
  }

  // ---------- Pipelines ----------
  const PIPELINE_STATES = ['pending', 'running', 'succeeded', 'failed', 'cancelled'];
  const pipelineLink = (id, name) => h('a', { href: '#/pipeline/' + encodeURIComponent(id), class: 'joblink' }, name || id);
  // A job of a pipeline that retention forgot has no state of its own any more: the pipeline
  // keeps how it ended (its `state` then comes from there), or shows it as forgotten.
  const memberState = (j) => j.state || 'forgotten';
  const memberWhy = (j) => ((j.pending_reasons || []).length ? j.pending_reasons.join('; ') : j.end_reason || '');

  function PipelinesView(root, r) {
    const st = { state: PIPELINE_STATES.includes(r.params.get('state')) ? r.params.get('state') : '', sig: null };
    const stateSel = h('select', { id: 'pipelines-state', name: 'state' }, h('option', { value: '', text: 'every state' }), PIPELINE_STATES.map((x) => h('option', { value: x, text: x })));
    stateSel.value = st.state;
    stateSel.addEventListener('change', () => {
      st.state = stateSel.value;
      history.replaceState(null, '', '#/pipelines' + q({ state: st.state }));
      refresh();
    });
    const wrap = h('div', { id: 'pipelines-table' });
    const note = h('p', { class: 'muted', id: 'pipelines-note' });
    root.append(
      h('div', { class: 'viewhead' }, h('h1', { text: 'Pipelines' }), h('span', { class: 'muted', text: 'jobs that depend on jobs; open one for its graph' })),
      h('section', { class: 'card' }, h('form', { class: 'filters', on: { submit: (e) => e.preventDefault() } }, h('label', null, 'State ', stateSel)), wrap, note)
    );
    async function refresh() {
      const list = await api('/v1/pipelines' + q({ limit: LIST_LIMIT, state: st.state }));
      // Redrawn only when the answer changed: a table rebuilt under the pointer swallows clicks.
      const sig = JSON.stringify([list.pipelines, list.total]);
      if (sig === st.sig) return;
      st.sig = sig;
      // Newest first, as the jobs view lists jobs (each page comes oldest first).
      const rows = list.pipelines.slice().reverse();
      fill(wrap,
        table(
          'pipelines',
          ['Pipeline', 'State', 'Tenant', 'Jobs', { label: 'Cost (USD)', num: true }, 'Submitted'],
          rows.map((p) => {
            const jobs = p.jobs || [];
            const done = jobs.filter((j) => j.state === 'succeeded').length;
            return h(
              'tr',
              { class: 'row', data: { id: p.id, state: p.state, tenant: p.tenant }, on: { click: (e) => { if (!e.target.closest('a')) location.hash = '#/pipeline/' + encodeURIComponent(p.id); } } },
              td([pipelineLink(p.id, p.name), h('div', { class: 'sub mono', text: p.id })]),
              td(badge(p.state)),
              td(p.tenant),
              td([done + ' of ' + jobs.length + ' succeeded ', h('span', { class: 'dots' }, jobs.map((j) => h('span', { class: 'dot st-' + memberState(j), title: j.name + ': ' + memberState(j) })))]),
              td(usd(p.cost_usd), 'num'),
              td(when(p.submitted_at_ms))
            );
          }),
          st.state ? 'No pipeline ' + st.state + '.' : 'No pipelines yet: submit one with POST /v1/pipelines or spillway submit FILE.'
        )
      );
      note.textContent = list.truncated ? 'The newest ' + list.pipelines.length + ' of ' + list.total + ' pipelines.' : '';
    }
    return { refresh, minInterval: 1000, onEvent: () => scheduleRefresh(500) };
  }

  // The graph: one column per depth (a job's longest chain of dependencies), dependencies on the
  // left, each job a box coloured by its state, linked to the job's page.
  function pipelineGraph(container, p) {
    const jobs = p.jobs || [];
    const byName = new Map(jobs.map((j) => [j.name, j]));
    const depth = new Map();
    const depthOf = (name, seen) => {
      if (depth.has(name)) return depth.get(name);
      const j = byName.get(name);
      // The server refuses cycles; `seen` only keeps a damaged record from looping here.
      const deps = j && !seen.has(name) ? j.depends_on || [] : [];
      seen.add(name);
      const d = deps.length ? 1 + Math.max(...deps.map((x) => depthOf(x, seen))) : 0;
      depth.set(name, d);
      return d;
    };
    for (const j of jobs) depthOf(j.name, new Set());
    const columns = [];
    for (const j of jobs) (columns[depth.get(j.name)] = columns[depth.get(j.name)] || []).push(j);
    const BW = 190;
    const BH = 46;
    const GX = 56;
    const GY = 14;
    const M = 8;
    const tallest = Math.max(1, ...columns.map((c) => (c ? c.length : 0)));
    const W = M * 2 + columns.length * BW + Math.max(0, columns.length - 1) * GX;
    const H = M * 2 + tallest * BH + (tallest - 1) * GY;
    const at = new Map();
    columns.forEach((col, c) =>
      (col || []).forEach((j, k) => {
        const offset = ((tallest - col.length) * (BH + GY)) / 2;
        at.set(j.name, { x: M + c * (BW + GX), y: M + offset + k * (BH + GY) });
      })
    );
    const svg = s('svg', { class: 'pgraph', id: 'pipeline-graph', width: W, height: H, viewBox: '0 0 ' + W + ' ' + H, role: 'img', 'aria-label': 'Graph of the pipeline: each job, its state, and what it runs after' });
    for (const j of jobs)
      for (const dep of j.depends_on || []) {
        const a = at.get(dep);
        const b = at.get(j.name);
        if (!a || !b) continue;
        const x1 = a.x + BW;
        const y1 = a.y + BH / 2;
        const x2 = b.x;
        const y2 = b.y + BH / 2;
        const mid = (x1 + x2) / 2;
        svg.append(s('path', { class: 'edge', d: 'M' + x1 + ' ' + y1 + 'C' + mid + ' ' + y1 + ' ' + mid + ' ' + y2 + ' ' + (x2 - 4) + ' ' + y2, data: { from: dep, to: j.name } }, s('title', null, j.name + ' runs after ' + dep)));
        svg.append(s('path', { class: 'arrow', d: 'M' + (x2 - 7) + ' ' + (y2 - 4) + 'L' + x2 + ' ' + y2 + 'L' + (x2 - 7) + ' ' + (y2 + 4) + 'Z' }));
      }
    for (const j of jobs) {
      const { x, y } = at.get(j.name);
      const state = memberState(j);
      const why = memberWhy(j);
      const short = (t, n) => (t.length > n ? t.slice(0, n - 1) + '…' : t);
      svg.append(
        s(
          'a',
          { href: '#/job/' + encodeURIComponent(j.id), class: 'pnode', data: { job: j.name, id: j.id, state } },
          s('title', null, j.name + ' (' + j.id + '): ' + state + (why ? ' · ' + why : '') + ' · ' + usd(j.cost_usd)),
          s('rect', { class: 'pbox st-' + state, x, y, width: BW, height: BH, rx: 6 }),
          s('rect', { class: 'pbar st-' + state, x, y, width: 6, height: BH, rx: 2 }),
          s('text', { class: 'pname', x: x + 14, y: y + 19 }, short(j.name, 24)),
          s('text', { class: 'pstate', x: x + 14, y: y + 36 }, state + (why ? ' · ' + short(why, 22) : ''))
        )
      );
    }
    fill(container, h('div', { class: 'scroll' }, svg), legend(['pending', 'provisioning', 'running', 'migrating', 'succeeded', 'failed', 'cancelled'].map((x) => ({ cls: 'st-' + x, label: x }))));
  }

  function PipelineView(root, r) {
    const id = r.arg || '';
    const head = h('div', { class: 'viewhead' }, h('h1', { text: id }));
    const summary = h('div', { class: 'cards', id: 'pipeline-summary' });
    const graph = h('div', { id: 'pipeline-graph-wrap' });
    const jobsEl = h('div', { id: 'pipeline-jobs' });
    root.append(h('p', null, h('a', { href: '#/pipelines', class: 'back', text: '‹ All pipelines' })), head, summary, section('Graph', graph), section('Jobs', jobsEl));
    let members = new Set();
    let sig = null;
    async function refresh() {
      let p;
      try {
        p = await api('/v1/pipelines/' + encodeURIComponent(id));
      } catch (e) {
        if (e.status === 404) {
          fill(head, h('h1', { text: 'No pipeline ' + id }));
          fill(summary, h('p', { class: 'muted', id: 'pipeline-missing', text: 'There is no such pipeline (retention forgets one with the last of its jobs), or this token may not see it.' }));
          fill(graph);
          fill(jobsEl);
          return;
        }
        throw e;
      }
      const now = JSON.stringify(p.jobs) + p.state + p.cost_usd;
      if (now === sig) return;
      sig = now;
      const jobs = p.jobs || [];
      members = new Set(jobs.map((j) => j.id));
      const card = (title, big, sub) => h('div', { class: 'card stat' }, h('div', { class: 'muted', text: title }), h('div', { class: 'big', text: big }), sub ? h('div', { class: 'sub', text: sub }) : null);
      const count = (x) => jobs.filter((j) => memberState(j) === x).length;
      fill(head, h('h1', { id: 'pipeline-name', text: p.name }), badge(p.state), h('span', { class: 'muted mono', text: p.id }), h('span', { class: 'muted', text: 'tenant ' + p.tenant }));
      fill(summary,
        card('Jobs', String(jobs.length), count('succeeded') + ' succeeded · ' + count('failed') + ' failed · ' + jobs.filter((j) => OPEN.has(j.state)).length + ' open'),
        card('Cost so far', usd(p.cost_usd), 'its jobs’ cost, egress included'),
        card('Submitted', when(p.submitted_at_ms), p.cancelled_by ? 'cancelled by ' + p.cancelled_by : null)
      );
      pipelineGraph(graph, p);
      fill(jobsEl,
        table(
          'pipeline-jobs',
          ['Job', 'State', 'After', { label: 'Cost (USD)', num: true }, 'Why it waits / how it ended'],
          jobs.map((j) => h('tr', { data: { job: j.name, id: j.id, state: memberState(j) } }, td([jobLink(j.id, j.name), h('div', { class: 'sub mono', text: j.id })]), td(badge(memberState(j))), td((j.depends_on || []).join(', ') || '—'), td(usd(j.cost_usd), 'num'), td(memberWhy(j), 'why'))),
          'No jobs.'
        )
      );
    }
    return {
      refresh,
      onEvent: (e) => {
        if (members.has(e.job_id)) scheduleRefresh(200);
      },
    };
  }

  const VIEWS = { jobs: JobsView, job: JobView, pipelines: PipelinesView, pipeline: PipelineView, capacity: CapacityView, cost: CostView, plan: PlanView };

  // ---------- theme ----------
  function applyTheme(t) {
    if (t === 'light' || t === 'dark') document.documentElement.setAttribute('data-theme', t);
    else document.documentElement.removeAttribute('data-theme');
    $('#theme').textContent = 'Theme: ' + (t || 'auto');
  }

  // ---------- boot ----------
  // Stripes for spot VMs and in-flight quota: SVG patterns, coloured by app.css.
  function patterns() {
    const stripe = (id, cls) =>
      s('pattern', { id, width: 6, height: 6, patternUnits: 'userSpaceOnUse', patternTransform: 'rotate(45)' }, s('rect', { class: cls, width: 6, height: 6 }), s('rect', { class: 'pstripe', width: 2, height: 6 }));
    document.body.append(s('svg', { class: 'defs', width: 0, height: 0, 'aria-hidden': 'true' }, s('defs', null, stripe('p-spot', 'pf-running'), stripe('p-inflight', 'pf-provisioning'))));
  }

  function boot() {
    patterns();
    let theme = localStorage.getItem(THEME_KEY) || '';
    applyTheme(theme);
    $('#theme').addEventListener('click', () => {
      theme = theme === '' ? 'light' : theme === 'light' ? 'dark' : '';
      localStorage.setItem(THEME_KEY, theme);
      applyTheme(theme);
    });
    $('#signout').addEventListener('click', () => signOut('Signed out.'));
    window.addEventListener('hashchange', route);
    let resizeTimer = null;
    window.addEventListener('resize', () => {
      clearTimeout(resizeTimer);
      resizeTimer = setTimeout(() => scheduleRefresh(0), 250);
    });
    takeTokenFromFragment();
    start();
  }
  if (document.readyState === 'loading') document.addEventListener('DOMContentLoaded', boot);
  else boot();
})();
