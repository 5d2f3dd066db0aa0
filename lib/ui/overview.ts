/**
 * The run overview: rollout counts, flags, and per-step training metrics (reward, pass rate,
 * alignment correlation, samples per rollout, break reasons, phase timings) as Observable Plot
 * charts rendered on the server; the region is re-fetched as steps arrive.
 *
 * @module
 */
import * as Plot from "@observablehq/plot";
import { plot } from "../plot/figure.ts";
import type { PhaseSnapshot } from "../schema.ts";
import type { TrainStepMetrics } from "../schema/ui.ts";
import { html, type SafeHtml, unsafeRaw } from "./html.ts";
import { badge, fmtNum } from "./layout.ts";
import type { RunIndex } from "./run_index.ts";

interface Point {
  step: number;
  series: string;
  value: number;
}

function lineChart(title: string, points: Point[], yDomain?: [number, number]): SafeHtml {
  if (points.length === 0) return html``;
  const fig = plot({
    title,
    width: 420,
    height: 220,
    marginLeft: 48,
    x: { label: "step" },
    y: { grid: true, label: null, ...(yDomain ? { domain: yDomain } : {}) },
    color: { legend: true },
    marks: [
      Plot.line(points, { x: "step", y: "value", stroke: "series", z: "series", marker: "circle" }),
    ],
  });
  return html`<div class="chart">${unsafeRaw(fig.svg())}</div>`;
}

function stackedChart(title: string, points: Point[]): SafeHtml {
  if (points.length === 0) return html``;
  const fig = plot({
    title,
    width: 420,
    height: 220,
    marginLeft: 48,
    x: { label: "step", type: "band" },
    y: { grid: true, label: null },
    color: { legend: true },
    marks: [Plot.barY(points, { x: "step", y: "value", fill: "series" }), Plot.ruleY([0])],
  });
  return html`<div class="chart">${unsafeRaw(fig.svg())}</div>`;
}

function series(steps: TrainStepMetrics[], fields: (keyof TrainStepMetrics & string)[]): Point[] {
  const out: Point[] = [];
  for (const s of steps) {
    for (const field of fields) {
      const value = s[field];
      if (typeof value === "number" && Number.isFinite(value)) {
        out.push({ step: s.step, series: field, value });
      }
    }
  }
  return out;
}

function records(steps: TrainStepMetrics[], field: "break_reasons" | "timings_ms"): Point[] {
  const out: Point[] = [];
  for (const s of steps) {
    for (const [key, value] of Object.entries(s[field] ?? {})) {
      if (Number.isFinite(value)) out.push({ step: s.step, series: key, value });
    }
  }
  return out;
}

const KNOWN = new Set([
  "step",
  "policy_version",
  "time",
  "reward_mean",
  "pass_rate",
  "alignment_corr",
  "rollouts",
  "samples",
  "samples_per_rollout",
  "break_reasons",
  "timings_ms",
]);

/** The overview's live region content. */
export function overviewFragment(
  base: string,
  index: RunIndex,
  phase: PhaseSnapshot | null,
): SafeHtml {
  const counts = index.statusCounts();
  const steps = index.stepList();
  const total = Object.values(counts).reduce((a, b) => a + b, 0);
  const flaggedCount = index.flagged.length;
  const cards = html`<div class="cards">
<div class="card"><span class="muted">rollouts</span><b id="total-rollouts">${total}</b></div>
${
    Object.entries(counts).map(([status, n]) =>
      html`<div class="card">${badge(status)}<b>${n}</b></div>`
    )
  }
<div class="card"><span class="muted">flagged</span><b><a href="${base}/rollouts?flagged=yes">${flaggedCount}</a></b></div>
<div class="card"><span class="muted">phase</span><b>${phase?.phase ?? "–"}</b>
<span class="muted">${phase ? `${phase.in_flight} in flight · ${phase.held} held` : ""}</span></div>
<div class="card"><span class="muted">training steps</span><b id="step-count">${steps.length}</b></div>
</div>`;
  const last = steps.at(-1);
  const extra = last ? Object.keys(last).filter((k) => !KNOWN.has(k)) : [];
  const charts = steps.length
    ? html`
      <div class="charts">
      ${lineChart("reward / pass rate", series(steps, ["reward_mean", "pass_rate"]))}
      ${lineChart("rollout–trainer alignment (Pearson)", series(steps, ["alignment_corr"]))}
      ${lineChart("samples per rollout", series(steps, ["samples_per_rollout"]))}
      ${stackedChart("break reasons", records(steps, "break_reasons"))}
      ${stackedChart("phase timings (ms)", records(steps, "timings_ms"))}
      </div>
      <h2>Steps</h2>
      <table id="steps">
        <thead>
          <tr><th class="num">step</th><th class="num">policy</th>
      <th class="num">reward</th><th class="num">pass rate</th><th class="num">alignment</th>
      <th class="num">samples/rollout</th>${extra.map((k) => html`<th class="num">${k}</th>`)}</tr>
        </thead>
        <tbody>${steps.slice(-50).reverse().map((s) =>
          html`<tr><td class="num">${s.step}</td><td class="num">${fmtNum(s.policy_version)}</td>
<td class="num">${fmtNum(s.reward_mean)}</td><td class="num">${fmtNum(s.pass_rate)}</td>
<td class="num">${fmtNum(s.alignment_corr, 4)}</td><td class="num">${
            fmtNum(s.samples_per_rollout, 2)
          }</td>
${
            extra.map((k) => {
              const v = s[k];
              return html`<td class="num">${
                typeof v === "number" ? fmtNum(v) : JSON.stringify(v ?? null)
              }</td>`;
            })
          }</tr>`
        )}</tbody>
      </table>
    `
    : html`<p class="muted" id="no-steps">No training steps yet. A training loop reports one as a
<code>custom</code> event named <code>train_step</code> (or a line of the metrics JSONL file).</p>`;
  const errors = index.stepErrors.length
    ? html`
      <details class="err">
        <summary>${index.stepErrors.length} unreadable metric record(s)</summary>
        <pre>${index.stepErrors.join("\n")}</pre>
      </details>
    `
    : "";
  const recent = index.recentFinished.length
    ? html`
      <h2>Recently finished</h2>
      <ul>${index.recentFinished.slice(0, 10).map((id) => {
        const f = index.flags.get(id);
        return html`<li><a href="${base}/rollouts/${encodeURIComponent(id)}">${id}</a>
${badge(index.status.get(id) ?? "?")}${
          f?.worst
            ? html`
              <span class="sev-${f.worst}">⚑ ${f.flags.length}</span>
            `
            : ""
        }</li>`;
      })}</ul>
    `
    : "";
  return html`${cards}${errors}${charts}${recent}
<p class="muted">${
    index.caughtUp ? "" : "Index still catching up with the store… "
  }seq ${index.lastSeq}</p>`;
}
