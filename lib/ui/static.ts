/**
 * The UI's stylesheet and its one small client script (no build step). The script follows the
 * UI's change feed (`/api/stream`, same entries as the gateway's `GET /v1/stream`) and
 * re-fetches the `data-live` regions a change concerns, debounced, so that pages grow live
 * without reloads.
 *
 * @module
 */

/** The stylesheet. */
export const APP_CSS = `
:root { --fg:#1d2330; --muted:#6b7280; --line:#e5e7eb; --bg:#fafafa; --accent:#2563eb; }
* { box-sizing: border-box; }
body { margin:0; font:14px/1.45 system-ui, sans-serif; color:var(--fg); background:var(--bg); }
header { display:flex; gap:16px; align-items:center; padding:8px 16px; background:#111827; color:#fff; }
header a { color:#cbd5e1; text-decoration:none; margin-right:12px; }
header a.active { color:#fff; font-weight:600; }
.brand { font-weight:700; letter-spacing:.04em; }
.live { margin-left:auto; font-size:12px; color:#9ca3af; }
.live.on { color:#4ade80; }
main { padding:16px; max-width:1600px; }
h1 { font-size:20px; margin:0 0 12px; } h2 { font-size:16px; margin:20px 0 8px; }
table { border-collapse:collapse; width:100%; background:#fff; }
th, td { border-bottom:1px solid var(--line); padding:4px 8px; text-align:left; vertical-align:top; }
th { background:#f3f4f6; font-weight:600; font-size:12px; }
td.num, th.num { text-align:right; font-variant-numeric:tabular-nums; }
.badge { padding:1px 6px; border-radius:8px; font-size:12px; background:#e5e7eb; }
.s-succeeded { background:#dcfce7; } .s-failed { background:#fee2e2; } .s-running { background:#dbeafe; }
.s-queuing, .s-requeuing { background:#fef9c3; } .s-cancelled { background:#e5e7eb; }
.sev-alert { color:#b91c1c; font-weight:600; } .sev-warn { color:#b45309; } .sev-info { color:var(--muted); }
.cards { display:flex; flex-wrap:wrap; gap:12px; }
.card { background:#fff; border:1px solid var(--line); border-radius:6px; padding:8px 12px; min-width:120px; }
.card b { display:block; font-size:20px; }
.charts { display:grid; grid-template-columns:repeat(auto-fill, minmax(400px, 1fr)); gap:16px; }
.chart { background:#fff; border:1px solid var(--line); padding:8px; min-width:0; }
.chart svg, .chart figure { max-width:100%; height:auto; margin:0; }
.scroll-x { overflow-x:auto; max-width:100%; }
form.filters.inline { margin:8px 0; }
label.check, form.filters label.check { flex-direction:row; gap:4px; align-items:center; }
details.columns { margin:8px 0; }
th a.sort { color:inherit; text-decoration:none; } th a.sort:hover { text-decoration:underline; }
form.filters { display:flex; flex-wrap:wrap; gap:8px; align-items:end; margin-bottom:8px; }
form.filters label { display:flex; flex-direction:column; font-size:12px; color:var(--muted); }
pre, .tokens { white-space:pre-wrap; word-break:break-word; font:12px/1.5 ui-monospace, monospace; }
pre { background:#fff; border:1px solid var(--line); padding:8px; max-height:480px; overflow:auto; margin:4px 0; }
details { margin:4px 0; } summary { cursor:pointer; }
.msg { border-left:3px solid var(--line); padding-left:8px; margin:6px 0; }
.msg .role { font-size:12px; color:var(--muted); font-weight:600; }
.reasoning { background:#f5f3ff; border-left:3px solid #8b5cf6; padding:4px 8px; }
.toolcall { background:#ecfeff; border-left:3px solid #0891b2; padding:4px 8px; }
.sample { background:#fff; border:1px solid var(--line); padding:8px; margin:8px 0; }
.split { background:#fff7ed; border:1px solid #fdba74; padding:6px 8px; margin:6px 0; }
.tokens { background:#fff; padding:6px; border:1px solid var(--line); max-height:520px; overflow:auto; }
.tk { border-radius:2px; }
.tk.ctx { color:#6b7280; }
.tk.trn { color:#111827; border-bottom:2px solid #16a34a; background:rgba(249,115,22,var(--u,0)); }
.tokens details.fold, .tokens details.fold > summary { display:inline; }
.tokens details.fold > summary { color:var(--muted); background:#f3f4f6; border-radius:3px; padding:0 4px; }
.seg { display:inline-block; font-size:10px; color:#fff; background:#2563eb; border-radius:3px;
  padding:0 3px; margin:0 2px; }
.legend span { margin-right:12px; }
.legend { display:flex; flex-wrap:wrap; gap:4px 14px; align-items:center; margin:8px 0; font-size:13px; }
.legend .key i, i.sw { display:inline-block; width:12px; height:12px; border-radius:2px; margin-right:5px; vertical-align:-1px; }
.charts.wide { grid-template-columns:repeat(auto-fill, minmax(640px, 1fr)); }
.charts.wide .chart { overflow-x:auto; } .charts.wide .chart svg { min-width:600px; }
.charts.small { grid-template-columns:repeat(auto-fill, minmax(330px, 1fr)); gap:10px; }
tr.group th { background:#eef2ff; text-align:left; font-size:13px; }
.metric-grid { display:grid; grid-template-columns:repeat(auto-fill, minmax(260px, 1fr)); gap:2px 16px; font-size:13px; }
section.group { margin:12px 0; } section.group h3 { font-size:14px; margin:6px 0; }
td.answer { max-width:420px; font:12px/1.4 ui-monospace, monospace; }
.sample-fact { display:inline-block; background:#f3f4f6; border-radius:3px; padding:0 4px; margin:1px; font-size:12px; }
.snippet { font-size:12px; color:var(--muted); max-width:560px; } .snippet mark { background:#fef08a; color:var(--fg); }
pre.diff span { display:block; } pre.diff .ins, #diff-head .ins { background:#dcfce7; }
pre.diff .del, #diff-head .del { background:#fee2e2; } pre.diff .ctx { color:#374151; }
.muted { color:var(--muted); } .err { color:#b91c1c; }
a { color:var(--accent); }
`;

/** The client script. */
export const APP_JS = `"use strict";
(() => {
  // A one-click login link (\`/ui/login#key=…\`, printed by the command line): the key sits in
  // the fragment, which the browser never sends, and is posted like a typed one.
  const login = document.getElementById("login");
  if (login && location.hash.startsWith("#key=")) {
    const key = decodeURIComponent(location.hash.slice(5));
    history.replaceState(null, "", location.pathname);
    const input = document.getElementById("key");
    if (input && key) { input.value = key; login.submit(); }
    return;
  }
  const body = document.body;
  const base = body.dataset.base || "";
  const indicator = document.getElementById("live");
  const regions = Array.from(document.querySelectorAll("[data-live]"));
  if (!regions.length) { if (indicator) indicator.textContent = ""; return; }
  const timers = new Map();
  let pending = 0;
  body.dataset.liveUpdates = "0";
  const refresh = (region) => {
    if (timers.has(region)) return;
    timers.set(region, setTimeout(async () => {
      timers.delete(region);
      pending++;
      try {
        const res = await fetch(region.dataset.live, { credentials: "same-origin", headers: { "x-reins-fragment": "1" } });
        if (res.ok) {
          // Keep what the reader opened (calls, logs) open across the swap.
          const open = Array.from(region.querySelectorAll("details[open][id]"), (d) => d.id);
          region.innerHTML = await res.text();
          for (const id of open) {
            const d = document.getElementById(id);
            if (d && region.contains(d)) d.open = true;
          }
          body.dataset.liveUpdates = String(Number(body.dataset.liveUpdates) + 1);
        }
      } catch (_) { /* the next change retries */ }
      pending--;
    }, 250));
  };
  const concerns = (region, change) => {
    const rollout = region.dataset.liveRollout;
    if (rollout && change.rollout_id !== rollout) return false;
    const types = region.dataset.liveTypes;
    if (types && change.kind === "event" && !types.split(",").includes(change.type)) return false;
    if (types && change.kind === "model" && !types.split(",").includes("model")) return false;
    return true;
  };
  const source = new EventSource(base + "/api/stream?after=" + (body.dataset.seq || "0"));
  source.addEventListener("open", () => {
    if (indicator) { indicator.textContent = "● live"; indicator.classList.add("on"); }
  });
  source.addEventListener("error", () => {
    if (indicator) { indicator.textContent = "○ reconnecting"; indicator.classList.remove("on"); }
  });
  source.addEventListener("change", (e) => {
    const change = JSON.parse(e.data);
    body.dataset.seq = String(change.seq);
    for (const region of regions) if (concerns(region, change)) refresh(region);
  });
})();
`;
