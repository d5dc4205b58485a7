// fabricwatch status page: reads the aggregator's JSON API every few seconds and renders it.
// Contract: every value from the API reaches the DOM through textContent, attribute setters or
// option values, never through an HTML parser, so a node name like <script> shows as text.
'use strict';

(function () {
  const REFRESH_MS = 5000;
  // A large fleet's /api/v1/nodes is megabytes: the page waits at least this many times as long
  // as the last refresh took, so a slow aggregator or link is never kept busy by the page.
  const REFRESH_COST_FACTOR = 10;
  const MAX_NODE_ROWS = 1000;  // problem nodes sort first, so a cap hides healthy ones only
  const MAX_PAIR_ROWS = 1000;
  const HEALTH_RANK = {critical: 0, warning: 1, unknown: 2, ok: 3};
  const STATE_TEXT = {
    ok: 'ok', degraded: 'degraded', down: 'down', flapping: 'flapping', congested: 'congested',
    unknown: 'unknown'
  };

  // Above this many cells the matrix turns compact: small cells, words only where not ok.
  const COMPACT_CELLS = 256;
  const SHORT_STATE = {ok: '', degraded: 'deg', down: 'down', flapping: 'flap',
                       congested: 'cong', unknown: '?'};

  let refreshes = 0;
  let generation = 0;  // bumped by each refresh(); an older one still in flight renders nothing
  let timer = null;
  let lastNodes = [];

  // ------------------------------------------------------------------ small helpers

  // el('td', {className: 'num', title: 't'}, 'text', childNode, ...): children that are not
  // nodes become text nodes.
  function el(tag, props, ...children) {
    const e = document.createElement(tag);
    for (const [k, v] of Object.entries(props || {})) {
      if (v === undefined || v === null) continue;
      if (k === 'dataset') {
        for (const [dk, dv] of Object.entries(v)) e.dataset[dk] = String(dv);
      } else {
        e[k] = v;
      }
    }
    for (const c of children) {
      if (c === undefined || c === null) continue;
      e.append(c instanceof Node ? c : document.createTextNode(String(c)));
    }
    return e;
  }

  function $(id) { return document.getElementById(id); }

  function setNote(id, text) {
    const p = $(id);
    p.textContent = text || '';
    p.hidden = !text;
  }

  const naturalCompare = new Intl.Collator(undefined, {numeric: true}).compare;

  function str(v) { return v === undefined || v === null ? '' : String(v); }

  function num(v) { return typeof v === 'number' && isFinite(v) ? v : null; }

  function fmtRatio(v) {
    v = num(v);
    if (v === null) return '–';
    return (v * 100).toFixed(v < 0.01 && v > 0 ? 2 : 1) + '%';
  }

  function fmtFixed(v, digits) {
    v = num(v);
    return v === null ? '–' : v.toFixed(digits);
  }

  function fmtSeconds(v) {
    v = num(v);
    if (v === null) return '–';
    if (v < 1e-3) return (v * 1e6).toFixed(0) + ' µs';
    if (v < 1) return (v * 1e3).toFixed(v < 0.01 ? 3 : 1) + ' ms';
    return v.toFixed(2) + ' s';
  }

  function fmtAge(v) {
    v = num(v);
    if (v === null) return '–';
    if (v < 120) return v.toFixed(0) + ' s ago';
    if (v < 7200) return (v / 60).toFixed(0) + ' min ago';
    return (v / 3600).toFixed(1) + ' h ago';
  }

  function fmtBps(v) {
    v = num(v);
    if (v === null) return '–';
    const units = [[1e12, 'Tbit/s'], [1e9, 'Gbit/s'], [1e6, 'Mbit/s'], [1e3, 'kbit/s']];
    for (const [scale, unit] of units) {
      if (v >= scale) return (v / scale).toFixed(1) + ' ' + unit;
    }
    return v.toFixed(0) + ' bit/s';
  }

  function fmtEvidenceValue(v) {
    if (typeof v === 'number') return Number.isInteger(v) ? String(v) : v.toPrecision(3);
    return typeof v === 'object' && v !== null ? JSON.stringify(v) : str(v);
  }

  // The aggregator's timestamp in the browser's time zone; the date only when it is not today.
  function fmtTime(rfc3339) {
    const t = Date.parse(str(rfc3339));
    if (isNaN(t)) return str(rfc3339);
    const d = new Date(t);
    const time = d.toLocaleTimeString();
    return d.toDateString() === new Date().toDateString() ? time
                                                          : d.toLocaleDateString() + ' ' + time;
  }

  // Paths are relative to the page, so it also works behind a reverse proxy that serves the
  // aggregator under a path prefix such as /fabricwatch/ (the prefix needs its trailing slash).
  async function getJson(path) {
    const r = await fetch(path, {cache: 'no-store', headers: {Accept: 'application/json'}});
    if (!r.ok) {
      let detail = '';
      try { detail = (await r.json()).error || ''; } catch (e) { /* not JSON */ }
      throw new Error(path + ' answered HTTP ' + r.status + (detail ? ': ' + detail : ''));
    }
    return r.json();
  }

  function asArray(v, what) {
    if (!Array.isArray(v)) throw new Error(what + ' is not a JSON array');
    return v;
  }

  // ------------------------------------------------------------------ findings

  function locationText(loc) {
    loc = loc || {};
    return str(loc.type) + ' ' + str(loc.id);
  }

  function locationDetail(loc) {
    loc = loc || {};
    const parts = [];
    if (loc.node) parts.push('node ' + loc.node);
    if (loc.device) parts.push('device ' + loc.device);
    if (loc.port) parts.push('port ' + loc.port);
    return parts.join(', ');
  }

  function renderFindings(findings) {
    const active = findings.filter(f => f && f.active !== false);
    const body = $('findings').tBodies[0];
    body.replaceChildren(...active.map(f => {
      const sev = str(f.severity);
      const evidence = Object.entries(f.evidence || {})
          .map(([k, v]) => k + ' ' + fmtEvidenceValue(v)).join(', ');
      return el('tr', {className: 'sev-' + sev, dataset: {kind: str(f.kind), id: str(f.id)}},
                el('td', {}, sev),
                el('td', {className: 'mono kind'}, str(f.kind)),
                el('td', {className: 'mono location', title: locationDetail(f.location)},
                   locationText(f.location)),
                el('td', {className: 'summary'}, str(f.summary),
                   evidence ? el('div', {className: 'evidence'}, evidence) : null),
                el('td', {className: 'num'}, fmtFixed(f.confidence, 2)),
                el('td', {className: 'time', title: str(f.first_seen)}, fmtTime(f.first_seen)));
    }));
    $('findings').hidden = active.length === 0;
    $('findings-count').textContent = '(' + active.length + ')';
    // Counts by kind, critical kinds first, so a long list reads at a glance.
    const kinds = new Map();
    for (const f of active) {
      const k = kinds.get(str(f.kind)) || {n: 0, critical: false};
      k.n += 1;
      k.critical = k.critical || f.severity === 'critical';
      kinds.set(str(f.kind), k);
    }
    const kindList = [...kinds.entries()].sort((a, b) => (b[1].critical - a[1].critical) ||
                                                         (b[1].n - a[1].n));
    $('findings-kinds').replaceChildren(...kindList.map(([kind, k]) => el('span', {
      className: 'chip mono' + (k.critical ? ' sev-critical' : '')}, kind + ' × ' + k.n)));
    $('findings-kinds').hidden = kindList.length < 2;
    setNote('findings-note', active.length === 0 ? 'No active findings.' : '');
    return active;
  }

  // ------------------------------------------------------------------ links

  function linkTitle(l) {
    return str(l.id) + ': ' + str(l.state) + ' · loss ' + fmtRatio(l.loss_ratio) +
           ' · latency ×' + fmtFixed(l.latency_inflation, 2) + ' · bandwidth ' +
           fmtRatio(l.bandwidth_ratio) + ' · ' + fmtFixed(l.probes, 0) + ' probes · confidence ' +
           fmtFixed(l.confidence, 2);
  }

  function stateClass(state) {
    return 'state-' + (Object.hasOwn(STATE_TEXT, state) ? state : 'unknown');
  }

  // Splits a link into (leaf, spine) when one end is a leaf and the other a spine.
  function leafSpine(l) {
    if (l.a_tier === 'leaf' && l.b_tier === 'spine') return [str(l.a), str(l.b)];
    if (l.a_tier === 'spine' && l.b_tier === 'leaf') return [str(l.b), str(l.a)];
    return null;
  }

  function renderLinks(links) {
    const matrix = $('matrix');
    const cells = new Map();  // "leaf\u0000spine" -> link
    const leaves = new Set(), spines = new Set();
    const others = [];
    let tiersKnown = false;
    for (const l of links) {
      if (!l) continue;
      if (l.a_tier !== undefined) tiersKnown = true;
      const ls = leafSpine(l);
      if (ls) {
        leaves.add(ls[0]);
        spines.add(ls[1]);
        cells.set(ls[0] + '\u0000' + ls[1], l);
      } else {
        others.push(l);
      }
    }
    const leafList = [...leaves].sort(naturalCompare);
    const spineList = [...spines].sort(naturalCompare);
    if (cells.size === 0) {
      matrix.replaceChildren();
      matrix.hidden = true;
      $('legend').hidden = true;
      if (links.length === 0) {
        setNote('matrix-note', 'No fabric map: the aggregator runs without --fabric-map, so it ' +
                'localizes faults to pairs and hosts only and has no links to show.');
      } else if (!tiersKnown) {
        setNote('matrix-note', 'This aggregator\'s /api/v1/links gives no switch tiers ' +
                '(a_tier, b_tier), so the matrix cannot be drawn.');
      } else {
        setNote('matrix-note', 'The fabric map has no leaf-to-spine links.');
      }
    } else {
      const compact = leafList.length * spineList.length > COMPACT_CELLS;
      matrix.classList.toggle('compact', compact);
      const head = el('tr', {}, el('th', {className: 'corner'}, 'leaf \\ spine'),
                      ...spineList.map(s => el('th', {scope: 'col'}, s)));
      const rows = leafList.map(leaf => el('tr', {},
          el('th', {className: 'leaf', scope: 'row'}, leaf),
          ...spineList.map(spine => {
            const l = cells.get(leaf + '\u0000' + spine);
            if (!l) {
              return el('td', {className: 'cell state-none', title: leaf + ' ~ ' + spine +
                               ': no link in the map'}, '·');
            }
            const state = str(l.state);
            const text = compact ? SHORT_STATE[state] ?? '?' : STATE_TEXT[state] || 'unknown';
            return el('td', {className: 'cell ' + stateClass(state), title: linkTitle(l),
                             dataset: {link: str(l.id), state: state}}, text);
          })));
      matrix.replaceChildren(el('thead', {}, head), el('tbody', {}, ...rows));
      matrix.hidden = false;
      $('legend').hidden = false;
      setNote('matrix-note', '');
    }

    // Host access links and tiers above the spines: only the ones that need attention.
    const bad = others.filter(l => l.state !== 'ok' && l.state !== 'unknown');
    const table = $('other-links');
    table.tBodies[0].replaceChildren(...bad.map(l => el('tr', {dataset: {link: str(l.id)}},
        el('td', {className: 'mono'}, str(l.id)),
        el('td', {className: stateClass(str(l.state))}, str(l.state)),
        el('td', {className: 'num'}, fmtRatio(l.loss_ratio)),
        el('td', {className: 'num'}, fmtFixed(l.latency_inflation, 2)),
        el('td', {className: 'num'}, fmtRatio(l.bandwidth_ratio)),
        el('td', {className: 'num'}, fmtFixed(l.probes, 0)),
        el('td', {className: 'num'}, fmtFixed(l.confidence, 2)))));
    table.hidden = bad.length === 0;
    $('other-links-title').hidden = bad.length === 0;
    if (others.length > 0) {
      const unknown = others.filter(l => l.state === 'unknown').length;
      setNote('other-links-note', others.length + ' links outside the matrix (host NIC cables ' +
              'and tiers above the spines): ' + (others.length - bad.length - unknown) + ' ok, ' +
              unknown + ' unknown, ' + bad.length + ' not ok.');
    } else {
      setNote('other-links-note', '');
    }
    const count = s => links.filter(l => l && l.state === s).length;
    return {total: links.length, bad: links.filter(l => l && l.state !== 'ok' &&
                                                   l.state !== 'unknown').length,
            down: count('down') + count('flapping')};
  }

  // ------------------------------------------------------------------ nodes

  function healthOf(n) {
    return n.connected ? str(n.health) || 'unknown' : 'critical';
  }

  function sortNodes(nodes) {
    return [...nodes].sort((a, b) => {
      const ra = HEALTH_RANK[healthOf(a)] ?? 2, rb = HEALTH_RANK[healthOf(b)] ?? 2;
      return ra !== rb ? ra - rb : naturalCompare(str(a.name), str(b.name));
    });
  }

  function renderNodes(nodes) {
    lastNodes = sortNodes(nodes);
    const filter = $('node-filter').value.trim().toLowerCase();
    const shown = filter ? lastNodes.filter(n => str(n.name).toLowerCase().includes(filter))
                         : lastNodes;
    const selected = selectedNode();
    const rows = shown.slice(0, MAX_NODE_ROWS).map(n => {
      const name = str(n.name);
      const inv = n.inventory || {};
      const ing = n.ingest || {};
      const health = str(n.health) || 'unknown';
      const button = el('button', {className: 'node', type: 'button', title: 'show its pairs'},
                        name);
      button.addEventListener('click', () => selectNode(name));
      return el('tr', {className: name === selected ? 'selected' : '', dataset: {node: name}},
                el('td', {className: 'name'}, button),
                el('td', {className: n.connected ? 'conn-yes' : 'conn-no'},
                   n.connected ? 'yes' : 'no'),
                el('td', {className: 'health-' + (HEALTH_RANK[health] === undefined ? 'unknown'
                                                                                    : health)},
                   health),
                el('td', {className: 'num', title: str(n.last_seen)}, fmtAge(n.last_report_age_s)),
                el('td', {className: 'mono'}, str(n.version)),
                el('td', {className: 'num'}, (inv.gpus || []).length),
                el('td', {className: 'num'}, (inv.nics || []).length),
                el('td', {className: 'num'}, str(ing.batches)),
                el('td', {className: 'num'}, str(ing.results)),
                el('td', {className: 'num'}, str(ing.gaps)));
    });
    $('nodes').tBodies[0].replaceChildren(...rows);
    const connected = nodes.filter(n => n.connected).length;
    $('nodes-count').textContent = '(' + connected + ' of ' + nodes.length + ' connected)';
    let note = '';
    if (nodes.length === 0) note = 'No agent has connected yet.';
    else if (shown.length === 0) note = 'No node name contains "' + filter + '".';
    else if (shown.length > MAX_NODE_ROWS) {
      note = 'Showing the first ' + MAX_NODE_ROWS + ' of ' + shown.length +
             ' nodes (problems first); filter by name to find others.';
    }
    setNote('nodes-note', note);
    renderNodeChoices(nodes);
    return {total: nodes.length, connected: connected,
            unhealthy: nodes.filter(n => HEALTH_RANK[healthOf(n)] < 2).length};
  }

  function renderNodeChoices(nodes) {
    const select = $('pair-node');
    const want = selectedNode();
    const names = nodes.map(n => str(n.name)).sort(naturalCompare);
    if (want && !names.includes(want)) names.unshift(want);
    const current = [...select.options].slice(1).map(o => o.value);
    if (current.length !== names.length || current.some((v, i) => v !== names[i])) {
      select.replaceChildren(el('option', {value: ''}, 'choose a node'),
                             ...names.map(name => el('option', {value: name}, name)));
    }
    select.value = want;
  }

  // ------------------------------------------------------------------ pairs of one node

  // The node whose pairs are shown, kept in the URL fragment (#node=NAME) so a link to the page
  // opens the same drill-down.
  function selectedNode() {
    const m = /^#node=(.*)$/.exec(location.hash);
    if (!m) return '';
    try { return decodeURIComponent(m[1]); } catch (e) { return ''; }
  }

  function selectNode(name) {
    const hash = name ? '#node=' + encodeURIComponent(name) : '';
    if (location.hash !== hash) history.replaceState(null, '', hash || location.pathname);
    refresh();
  }

  function renderPairs(node, pairs) {
    const body = $('pairs').tBodies[0];
    const json = $('pairs-json');
    json.hidden = !node;
    json.href = node ? 'api/v1/pairs?src=' + encodeURIComponent(node) : '';
    if (!node) {
      body.replaceChildren();
      $('pairs').hidden = true;
      setNote('pairs-note', 'Choose a node, or click one in the node table, to see the pairs ' +
              'it probes.');
      return;
    }
    const w = (p, name) => (p.windows || {})[name] || {};
    const sorted = [...pairs].sort((a, b) => naturalCompare(str(a.dst), str(b.dst)) ||
                                             naturalCompare(str(a.transport), str(b.transport)));
    body.replaceChildren(...sorted.slice(0, MAX_PAIR_ROWS).map(p => {
      const w10 = w(p, '10s'), w60 = w(p, '60s'), w600 = w(p, '600s');
      const lossy = (num(w10.loss_ratio) || 0) > 0;
      return el('tr', {className: lossy ? 'sev-warning' : '', dataset: {dst: str(p.dst)}},
                el('td', {}, str(p.dst)),
                el('td', {className: 'mono'}, str(p.transport)),
                el('td', {}, str(p.path_class)),
                el('td', {className: 'num'}, (p.flows || []).length),
                el('td', {className: 'num'}, fmtFixed(w10.probes, 0)),
                el('td', {className: 'num'}, fmtRatio(w10.loss_ratio)),
                el('td', {className: 'num'}, fmtSeconds(w10.rtt_p50_s)),
                el('td', {className: 'num'}, fmtSeconds(w10.rtt_p99_s)),
                el('td', {className: 'num'}, fmtSeconds(w60.rtt_p99_s)),
                el('td', {className: 'num'}, fmtRatio(w600.loss_ratio)),
                el('td', {className: 'num'}, fmtSeconds(w600.rtt_p99_s)),
                el('td', {className: 'num'}, fmtBps(w600.bandwidth_bps)));
    }));
    $('pairs').hidden = sorted.length === 0;
    let note = '';
    if (sorted.length === 0) note = 'The aggregator holds no pairs from ' + node + ' yet.';
    else if (sorted.length > MAX_PAIR_ROWS) note = 'Showing ' + MAX_PAIR_ROWS + ' of ' + sorted.length + ' pairs.';
    setNote('pairs-note', note);
  }

  // ------------------------------------------------------------------ the refresh loop

  async function refresh() {
    clearTimeout(timer);
    const gen = ++generation;
    const started = performance.now();
    const node = selectedNode();
    const [nodes, findings, links, pairs] = await Promise.allSettled([
      getJson('api/v1/nodes').then(v => asArray(v, 'api/v1/nodes')),
      getJson('api/v1/findings?active=true').then(v => asArray(v, 'api/v1/findings')),
      getJson('api/v1/links').then(v => asArray(v, 'api/v1/links')),
      node ? getJson('api/v1/pairs?src=' + encodeURIComponent(node))
                 .then(v => asArray(v, 'api/v1/pairs'))
           : Promise.resolve([]),
    ]);
    if (gen !== generation) return;  // a newer refresh (e.g. another node chosen) owns the page
    const errors = [];
    const settle = (r, fn) => {
      if (r.status === 'fulfilled') {
        try { return fn(r.value); } catch (e) { errors.push(String(e)); return null; }
      }
      errors.push(String(r.reason && r.reason.message || r.reason));
      return null;
    };
    const f = settle(findings, renderFindings);
    const l = settle(links, renderLinks);
    const n = settle(nodes, renderNodes);
    settle(pairs, v => renderPairs(node, v));

    const parts = [];
    if (f) {
      const crit = f.filter(x => x.severity === 'critical').length;
      parts.push(f.length === 0 ? 'no active findings'
                                : f.length + ' active finding' + (f.length === 1 ? '' : 's') +
                                  (crit ? ' (' + crit + ' critical)' : ''));
    }
    if (l && l.total) parts.push(l.bad + ' of ' + l.total + ' links not ok');
    if (n) {
      parts.push(n.connected + ' of ' + n.total + ' agents connected' +
                 (n.unhealthy ? ', ' + n.unhealthy + ' unhealthy' : ''));
    }
    const summary = $('summary');
    summary.textContent = parts.length ? parts.join(' · ') : 'The API did not answer.';
    summary.className = 'summary' + (f && f.length ? ' has-findings' : '');
    setNote('error', errors.length ? 'Could not read the API: ' + errors.join('; ') +
                                     '. Tables show the last data that loaded.' : '');
    const took = performance.now() - started;
    const delay = Math.max(REFRESH_MS, REFRESH_COST_FACTOR * took);
    $('updated').textContent = 'updated ' + new Date().toLocaleTimeString() + ' in ' +
                               (took / 1000).toFixed(1) + ' s' +
                               (errors.length ? ' (' + errors.length + ' endpoint failed)' : '') +
                               ', next in ' + (delay / 1000).toFixed(0) + ' s';

    // A marker only this script sets: tests read it to know the page rendered from the API.
    refreshes += 1;
    document.documentElement.dataset.fwRefreshes = String(refreshes);
    document.documentElement.dataset.fwErrors = String(errors.length);
    if (!document.hidden) timer = setTimeout(refresh, delay);
  }

  function start() {
    $('node-filter').addEventListener('input', () => {
      if (lastNodes.length) renderNodes(lastNodes);
    });
    $('pair-node').addEventListener('change', e => selectNode(e.target.value));
    window.addEventListener('hashchange', refresh);
    document.addEventListener('visibilitychange', () => {
      if (!document.hidden) refresh();
      else clearTimeout(timer);
    });
    refresh();
  }

  if (document.readyState === 'loading') document.addEventListener('DOMContentLoaded', start);
  else start();
})();
