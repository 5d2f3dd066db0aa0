/**
 * The run overview: rollout counts, flags, and per-step training metrics as Observable Plot
 * charts rendered on the server (train and eval reward with a 95% band, pass rate, alignment,
 * entropy, samples per rollout, break reasons and the disjoint phase timings), a smoothing
 * control and a steps table with chosen columns. The region is re-fetched as steps arrive.
 *
 * @module
 */
import type { Store } from "../gateway/store.ts";
import type { PhaseSnapshot } from "../schema.ts";
import type { TrainStepMetrics } from "../schema/ui.ts";
import { MISMATCH_THRESHOLDS } from "../algo/alignment.ts";
import { ci95HalfWidth, meanCi } from "../util/stats.ts";
import { disjointTimings, lineChart, type SeriesPoint, stackedChart } from "./charts.ts";
import { html, type SafeHtml } from "./html.ts";
import { badge, fmtNum } from "./layout.ts";
import type { RunIndex } from "./run_index.ts";

/** Smoothing weights the overview and runs pages offer. */
export const SMOOTHING_CHOICES = [0, 0.6, 0.8, 0.9, 0.95] as const;

/** Columns of the steps table shown when none are chosen. */
export const DEFAULT_COLUMNS = [
  "policy_version",
  "reward_mean",
  "eval_reward",
  "pass_rate",
  "alignment_corr",
  "entropy",
  "samples_per_rollout",
  "filtered",
  "step_ms",
] as const;

/** One eval measurement: mean reward of the eval rollouts at a step, with its 95% interval. */
export interface EvalPoint {
  step: number;
  mean: number;
  n: number;
  lo: number;
  hi: number;
}

/** The overview's view settings (query-string values). */
export interface OverviewView {
  smoothing: number;
  /** Table columns (besides `step`). */
  columns: readonly string[];
}

/**
 * Parses `smooth` and `cols` of the overview's query string (bad values fall back to defaults).
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * import { overviewView } from "./overview.ts";
 * const view = overviewView(new URLSearchParams("smooth=0.9&cols=entropy,loss"));
 * assert.equal(view.smoothing, 0.9);
 * assert.deepEqual(view.columns, ["entropy", "loss"]);
 * assert.equal(overviewView(new URLSearchParams("smooth=7")).smoothing, 0);
 * ```
 */
export function overviewView(params: URLSearchParams): OverviewView {
  const s = Number(params.get("smooth") ?? 0);
  const cols = (params.getAll("cols").join(",") || "").split(",").map((c) => c.trim())
    .filter((c) => /^[A-Za-z0-9_.]{1,64}$/.test(c));
  return {
    smoothing: Number.isFinite(s) && s >= 0 && s < 1 ? s : 0,
    columns: cols.length ? cols : DEFAULT_COLUMNS,
  };
}

/** The query string of a view (for links and the live region's URL). */
export function viewQuery(view: OverviewView): string {
  const params = new URLSearchParams();
  if (view.smoothing) params.set("smooth", String(view.smoothing));
  if (view.columns.join(",") !== DEFAULT_COLUMNS.join(",")) {
    params.set("cols", view.columns.join(","));
  }
  const text = params.toString();
  return text ? `?${text}` : "";
}

/**
 * Mean and 95% Student-t interval of rewards as a band (`lo` = `hi` = the mean when there is no
 * interval, n < 2), from `meanCi` in `lib/util/stats.ts` like every other interval reins shows.
 */
function meanBand(values: readonly number[]): { mean: number; lo: number; hi: number } {
  const { mean, ci95 } = meanCi(values);
  const half = Number.isFinite(ci95) ? ci95 : 0;
  return { mean, lo: mean - half, hi: mean + half };
}

/**
 * Eval rewards per step from the store's `val` rollouts that carry a `step` label (the loop's
 * `evaluatePolicy` sets it), reading at most `budget` rollouts.
 */
export async function loadEvalPoints(
  store: Store,
  budget = 5_000,
  labels?: Record<string, string>,
): Promise<EvalPoint[]> {
  const byStep = new Map<number, number[]>();
  let after: string | undefined;
  let read = 0;
  do {
    const page = await store.listRollouts({
      mode: "val",
      limit: 500,
      ...(labels ? { labels } : {}),
      ...(after ? { after } : {}),
    });
    read += page.items.length;
    for (const r of page.items) {
      const step = Number(r.labels.step);
      if (r.labels.step === undefined || !Number.isInteger(step) || r.reward === null) continue;
      if (!byStep.has(step)) byStep.set(step, []);
      byStep.get(step)!.push(r.reward);
    }
    after = page.next_cursor ?? undefined;
  } while (after && read < budget);
  return [...byStep].sort((a, b) => a[0] - b[0]).map(([step, rewards]) => ({
    step,
    n: rewards.length,
    ...meanBand(rewards),
  }));
}

/**
 * Reward points of steps: the train reward with a 95% band from `reward_std` and `rollouts`
 * (Student-t, `ci95HalfWidth`), the eval reward from `evals` or the metrics' `val_reward`.
 */
export function rewardPoints(
  steps: readonly TrainStepMetrics[],
  evals: readonly EvalPoint[] = [],
): SeriesPoint[] {
  const out: SeriesPoint[] = [];
  for (const s of steps) {
    const mean = s.reward_mean;
    if (typeof mean !== "number") continue;
    const std = s.reward_std;
    const n = s.rollouts;
    const band = typeof std === "number" && typeof n === "number" && n > 1
      ? ci95HalfWidth(std, n)
      : null;
    out.push({
      x: s.step,
      series: "train reward",
      y: mean,
      ...(band !== null ? { lo: mean - band, hi: mean + band } : {}),
    });
  }
  for (const e of evals) {
    out.push({ x: e.step, series: "eval reward", y: e.mean, lo: e.lo, hi: e.hi });
  }
  if (!evals.length) {
    for (const s of steps) {
      const v = s.val_reward;
      if (typeof v === "number" && Number.isFinite(v)) {
        out.push({ x: s.step, series: "eval reward", y: v });
      }
    }
  }
  return out;
}

/** Points of numeric fields, one series per field (label = field name or `rename`). */
export function fieldPoints(
  steps: readonly TrainStepMetrics[],
  fields: readonly string[],
  rename: Record<string, string> = {},
): SeriesPoint[] {
  const out: SeriesPoint[] = [];
  for (const s of steps) {
    for (const field of fields) {
      const value = s[field];
      if (typeof value === "number" && Number.isFinite(value)) {
        out.push({ x: s.step, series: rename[field] ?? field, y: value });
      }
    }
  }
  return out;
}

function recordPoints(
  steps: readonly TrainStepMetrics[],
  pick: (s: TrainStepMetrics) => Record<string, number> | undefined,
): SeriesPoint[] {
  const out: SeriesPoint[] = [];
  for (const s of steps) {
    for (const [key, value] of Object.entries(pick(s) ?? {})) {
      if (Number.isFinite(value) && value > 0) out.push({ x: s.step, series: key, y: value });
    }
  }
  return out;
}

/**
 * A table cell for any metric value: numbers formatted, records as `key value` pairs (zeros
 * left out), anything else as compact text.
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * import { cellText } from "./overview.ts";
 * assert.equal(cellText({ error: 0, zero_variance: 2, stale: 1 }), "zero_variance 2 · stale 1");
 * assert.equal(cellText({ error: 0 }), "none");
 * assert.equal(cellText(0.5), "0.500");
 * ```
 */
export function cellText(value: unknown, digits = 3): string {
  if (value === null || value === undefined) return "–";
  if (typeof value === "number") return fmtNum(value, digits);
  if (typeof value === "string" || typeof value === "boolean") return String(value);
  if (Array.isArray(value)) return value.map((v) => cellText(v, digits)).join(", ");
  if (typeof value === "object") {
    const parts = Object.entries(value as Record<string, unknown>)
      .filter(([, v]) => v !== 0 && v !== null && v !== undefined)
      .map(([k, v]) => `${k} ${cellText(v, digits)}`);
    return parts.length ? parts.join(" · ") : "none";
  }
  return String(value);
}

/** A step's value for a table column (`eval_reward` and `step_ms` are derived). */
function columnValue(
  s: TrainStepMetrics,
  column: string,
  evals: ReadonlyMap<number, EvalPoint>,
): unknown {
  if (column === "eval_reward") return evals.get(s.step)?.mean ?? s.val_reward;
  if (column === "step_ms") return s.timings_ms?.step;
  return s[column];
}

const DIGITS: Record<string, number> = { alignment_corr: 6, alignment_logprob_corr: 6 };

/** The steps table, newest first, with the chosen columns and a column picker. */
export function stepsTable(
  base: string,
  steps: readonly TrainStepMetrics[],
  evals: readonly EvalPoint[],
  view: OverviewView,
): SafeHtml {
  const evalByStep = new Map(evals.map((e) => [e.step, e]));
  const available = new Set<string>(["eval_reward", "step_ms"]);
  for (const s of steps) for (const k of Object.keys(s)) if (k !== "step") available.add(k);
  const columns = view.columns.filter((c) => available.has(c));
  const picker = html`
    <details class="columns" id="column-picker">
      <summary>columns</summary>
      <form method="get" action="${base}/" class="filters">
    ${view.smoothing ? html`<input type="hidden" name="smooth" value="${view.smoothing}">` : ""}
    ${[...available].sort().map((c) =>
      html`
        <label
          class="check"><input type="checkbox" name="cols" value="${c}" ${columns.includes(c)
            ? "checked"
            : ""}>${c}</label>
      `
    )}
    <button type="submit" id="apply-columns">Show</button></form>
    </details>
  `;
  const rows = steps.slice(-50).reverse().map((s) =>
    html`<tr><td class="num">${s.step}</td>${
      columns.map((c) => {
        const v = columnValue(s, c, evalByStep);
        return html`<td class="${typeof v === "number" ? "num" : ""}">${
          cellText(v, DIGITS[c] ?? 3)
        }</td>`;
      })
    }</tr>`
  );
  return html`
    ${picker}<div class="scroll-x">
      <table id="steps">
        <thead>
          <tr><th class="num">step</th>${columns.map((c) => html`<th>${c}</th>`)}</tr>
        </thead>
        <tbody>${rows}</tbody>
      </table>
    </div>
  `;
}

/** The charts of one run's steps. */
export function stepCharts(
  steps: readonly TrainStepMetrics[],
  evals: readonly EvalPoint[],
  smoothing: number,
): SafeHtml {
  return html`<div class="charts">
${
    lineChart(rewardPoints(steps, evals), {
      title: "reward (train, eval)",
      note: "band: 95% normal interval of the mean over the step's rollouts",
      smoothing,
      id: "reward",
    })
  }
${lineChart(fieldPoints(steps, ["pass_rate"]), { title: "pass rate", smoothing, id: "pass" })}
${
    lineChart(fieldPoints(steps, ["alignment_corr"], { alignment_corr: "Pearson p" }), {
      title: "rollout–trainer alignment (Pearson)",
      smoothing,
      id: "alignment",
      thresholds: [{ y: MISMATCH_THRESHOLDS.pearson_prob_min, label: "LEGO ≥ 0.99" }],
    })
  }
${
    lineChart(
      fieldPoints(steps, ["alignment_mean_abs_dp"], { alignment_mean_abs_dp: "mean |Δp|" }),
      {
        title: "engine–trainer mismatch (mean |Δp|)",
        note: "verl's rollout_probs_diff_mean; healthy below the dashed line",
        smoothing,
        id: "mismatch",
        thresholds: [{ y: MISMATCH_THRESHOLDS.mean_abs_dp_max, label: "0.005" }],
      },
    )
  }
${
    lineChart(fieldPoints(steps, ["alignment_k3_kl"], { alignment_k3_kl: "k3 KL" }), {
      title: "engine–trainer mismatch (k3 KL)",
      smoothing,
      id: "mismatch_kl",
      thresholds: [{ y: MISMATCH_THRESHOLDS.k3_kl_max, label: "1e-3" }],
    })
  }
${lineChart(fieldPoints(steps, ["entropy"]), { title: "entropy", smoothing, id: "entropy" })}
${
    lineChart(fieldPoints(steps, ["samples_per_rollout"]), {
      title: "samples per rollout",
      smoothing,
      id: "samples",
    })
  }
${
    stackedChart(recordPoints(steps, (s) => s.break_reasons), {
      title: "break reasons (count)",
      id: "breaks",
    })
  }
${
    stackedChart(
      recordPoints(steps, (s) => s.timings_ms ? disjointTimings(s.timings_ms) : undefined)
        .map((p) => ({ ...p, y: p.y / 1000 })),
      {
        title: "phase timings (s)",
        note: "disjoint parts; bars sum to the step's wall time",
        id: "timings",
      },
    )
  }
</div>`;
}

function smoothingForm(base: string, view: OverviewView): SafeHtml {
  return html`<form method="get" action="${base}/" class="filters inline" id="smoothing">
<label>smoothing <select name="smooth" id="f-smooth">${
    SMOOTHING_CHOICES.map((s) =>
      html`<option value="${s}" ${s === view.smoothing ? "selected" : ""}>${
        s === 0 ? "none" : `EMA ${s}`
      }</option>`
    )
  }</select></label>
${
    view.columns.join(",") !== DEFAULT_COLUMNS.join(",")
      ? html`<input type="hidden" name="cols" value="${view.columns.join(",")}">`
      : ""
  }
<button type="submit" id="apply-smoothing">Apply</button></form>`;
}

/** The overview's live region content. */
export function overviewFragment(
  base: string,
  index: RunIndex,
  phase: PhaseSnapshot | null,
  evals: readonly EvalPoint[] = [],
  view: OverviewView = { smoothing: 0, columns: DEFAULT_COLUMNS },
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
  const charts = steps.length
    ? html`${smoothingForm(base, view)}${stepCharts(steps, evals, view.smoothing)}
<h2>Steps</h2>${stepsTable(base, steps, evals, view)}`
    : html`<p class="muted" id="no-steps">No training steps yet. A training loop reports one as a
<code>custom</code> event named <code>train_step</code> under a reserved <code>reins:</code> event key
(admin key only), or as a line of the metrics JSONL file.</p>`;
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
          f?.worst ? html`<span class="sev-${f.worst}">⚑ ${f.flags.length}</span>` : ""
        }</li>`;
      })}</ul>
    `
    : "";
  return html`${cards}${errors}${charts}${recent}
<p class="muted">${
    index.caughtUp ? "" : "Index still catching up with the store… "
  }seq ${index.lastSeq}</p>`;
}
