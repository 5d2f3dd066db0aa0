/**
 * The proxy page: phase (with in-flight and held calls), registered policy endpoints, and per
 * upstream the call count, error rate, latency and retries over the most recent calls.
 *
 * @module
 */
import type { Model, PhaseSnapshot } from "../schema.ts";
import { html, type SafeHtml, tableHead } from "./html.ts";
import { fmtNum, fmtTime } from "./layout.ts";

/** The facts of one model call the proxy page aggregates. */
export interface CallFact {
  seq: number;
  rollout_id: string;
  upstream: string | null;
  http_status: number;
  error: string | null;
  latency_ms: number;
  retry_count: number;
  flavor: string;
  created_at: number;
}

/** Per-upstream statistics of a set of calls. */
export interface UpstreamStats {
  upstream: string;
  calls: number;
  errors: number;
  error_rate: number;
  latency_mean_ms: number;
  latency_p95_ms: number;
  retries: number;
}

/**
 * Groups calls by upstream and computes error rate, mean/p95 latency and retries.
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * import { upstreamStats } from "./proxy_view.ts";
 * const call = { seq: 1, rollout_id: "r", upstream: "u", http_status: 500, error: "x",
 *   latency_ms: 10, retry_count: 1, flavor: "openai_chat", created_at: 0 };
 * assert.equal(upstreamStats([call])[0].error_rate, 1);
 * ```
 */
export function upstreamStats(calls: readonly CallFact[]): UpstreamStats[] {
  const groups = new Map<string, CallFact[]>();
  for (const c of calls) {
    const key = c.upstream ?? "(none)";
    const list = groups.get(key) ?? [];
    list.push(c);
    groups.set(key, list);
  }
  return [...groups.entries()].map(([upstream, list]) => {
    const errors = list.filter((c) => c.http_status >= 400 || c.error !== null).length;
    const lat = list.map((c) => c.latency_ms).sort((a, b) => a - b);
    return {
      upstream,
      calls: list.length,
      errors,
      error_rate: errors / list.length,
      latency_mean_ms: lat.reduce((a, b) => a + b, 0) / lat.length,
      latency_p95_ms: lat[Math.min(lat.length - 1, Math.floor(lat.length * 0.95))],
      retries: list.reduce((a, c) => a + c.retry_count, 0),
    };
  }).sort((a, b) => b.calls - a.calls);
}

/** The proxy page's live region content. */
export function proxyFragment(
  base: string,
  phase: PhaseSnapshot | null,
  models: Model[],
  calls: CallFact[],
): SafeHtml {
  const stats = upstreamStats(calls);
  const failed = calls.filter((c) => c.http_status >= 400 || c.error !== null).slice(-20).reverse();
  return html`
    <div class="cards">
      <div class="card"><span class="muted">phase</span><b id="phase">${phase?.phase ??
        "unknown"}</b>
    <span class="muted">${phase ? `since ${fmtTime(phase.since)}` : ""}</span></div>
      <div class="card"><span class="muted">in flight</span><b id="in-flight">${phase?.in_flight ??
        "–"}</b></div>
      <div class="card"><span class="muted">held</span><b id="held">${phase?.held ?? "–"}</b></div>
      <div class="card"><span class="muted">recent calls</span><b>${calls.length}</b></div>
    </div>
    <h2>Policy endpoints</h2>${models.length
      ? html`
        <table id="models">
          ${tableHead(["model", { num: "version" }, "endpoints", "updated"])}
          <tbody>${models.map((m) =>
            html`
              <tr>
                <td>${m.name}</td>
                <td class="num">${m.version}</td>
                <td>${m.endpoints.map((e) =>
                  html`
                    <code>${e}</code>
                  `
                )}</td>
                <td>${fmtTime(m.updated_at)}</td>
              </tr>
            `
          )}</tbody>
        </table>
      `
      : html`<p class="muted">No model registered.</p>`}
    <h2>Upstreams (last ${calls.length} calls)</h2>${stats.length
      ? html`
        <table id="upstreams">
          ${tableHead([
            "upstream",
            { num: "calls" },
            { num: "errors" },
            { num: "error rate" },
            { num: "mean latency ms" },
            { num: "p95 latency ms" },
            { num: "retries" },
          ])}
          <tbody>${stats.map((s) =>
            html`
              <tr>
                <td><code>${s.upstream}</code></td>
                <td class="num">${s.calls}</td>
                <td class="num">${s.errors}</td>
                <td class="num">${(100 * s.error_rate).toFixed(1)}%</td>
                <td class="num">${fmtNum(s.latency_mean_ms, 1)}</td>
                <td class="num">${fmtNum(s.latency_p95_ms, 1)}</td>
                <td class="num">${s.retries}</td>
              </tr>
            `
          )}</tbody>
        </table>
      `
      : html`<p class="muted">No model calls yet.</p>`}
    ${failed.length
      ? html`
        <h2>Recent failed calls</h2>
        <ul>${failed.map((c) =>
          html`<li><a href="${base}/rollouts/${
            encodeURIComponent(c.rollout_id)
          }#call-${c.seq}">${c.rollout_id} seq ${c.seq}</a>
HTTP ${c.http_status} ${c.error ?? ""}</li>`
        )}</ul>
      `
      : ""}
  `;
}
