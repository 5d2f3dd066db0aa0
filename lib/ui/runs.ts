/**
 * Runs side by side: the runs a UI knows (every directory holding a `metrics.jsonl` under the
 * runs directory, e.g. `runs/` or an experiment grid in `experiments/results/<grid>/`, and every
 * run that reported `train_step` events to this gateway), their reward, eval reward, entropy
 * and alignment curves overlaid with 95% bands and smoothing, and the differences between
 * their configs.
 *
 * A band is the normal-approximation 95% interval of a step's mean reward over its rollouts
 * (`reward_std`, `rollouts`); with "seeds pooled", runs that differ only in their seed suffix
 * (`-s<k>`) are drawn as one curve: the mean over seeds with a 95% Student-t interval.
 *
 * @module
 */
import type { Store } from "../gateway/store.ts";
import { parseOrThrow } from "../schema.ts";
import { type TrainStepMetrics, TrainStepMetricsSchema } from "../schema/ui.ts";
import { ci95HalfWidth, meanCi } from "../util/stats.ts";
import { lineChart, type SeriesPoint } from "./charts.ts";
import { html, type SafeHtml, tableHead } from "./html.ts";
import { fmtNum } from "./layout.ts";
import { cellText, type EvalPoint, loadEvalPoints, SMOOTHING_CHOICES } from "./overview.ts";
import type { RunIndex } from "./run_index.ts";

/** One run the runs page can show. */
export interface RunInfo {
  /** Stable id used in links (`dir:<path under the runs directory>` or `gw:<rollout id>`). */
  id: string;
  name: string;
  source: "dir" | "gateway";
  /** The experiment grid (parent directory under the runs directory), if any. */
  grid: string | null;
  config: Record<string, unknown> | null;
  /** What the run wrote when it finished (`done.json`), if anything. */
  done: Record<string, unknown> | null;
  steps: TrainStepMetrics[];
  evals: EvalPoint[];
}

const MAX_RUNS = 500;
const MAX_METRICS_BYTES = 20 * 1024 * 1024;

async function readJson(path: string): Promise<Record<string, unknown> | null> {
  try {
    const value = JSON.parse(await Deno.readTextFile(path));
    return value && typeof value === "object" && !Array.isArray(value) ? value : null;
  } catch {
    return null;
  }
}

async function readSteps(path: string): Promise<TrainStepMetrics[]> {
  const stat = await Deno.stat(path);
  if (stat.size > MAX_METRICS_BYTES) return [];
  const steps = new Map<number, TrainStepMetrics>();
  for (const line of (await Deno.readTextFile(path)).split("\n")) {
    if (!line.trim()) continue;
    try {
      const step = parseOrThrow(TrainStepMetricsSchema, JSON.parse(line), "line");
      steps.set(step.step, step);
    } catch {
      // A bad line is shown on the overview of a live run; here it is skipped.
    }
  }
  return [...steps.values()].sort((a, b) => a.step - b.step);
}

/**
 * Runs under a directory: each directory (at most two levels down) that holds a
 * `metrics.jsonl`; its config is `config.json` or the `config` of an experiment's `cell.json`.
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * import { runsInDirectory } from "./runs.ts";
 * const dir = await Deno.makeTempDir();
 * await Deno.mkdir(`${dir}/grid/a-s0`, { recursive: true });
 * await Deno.writeTextFile(`${dir}/grid/a-s0/metrics.jsonl`, '{"step":0,"reward_mean":0.5}\n');
 * await Deno.writeTextFile(`${dir}/grid/a-s0/config.json`, '{"lr":0.1}');
 * const [run] = await runsInDirectory(dir);
 * assert.equal(run.id, "dir:grid/a-s0");
 * assert.equal(run.grid, "grid");
 * assert.deepEqual(run.config, { lr: 0.1 });
 * await Deno.remove(dir, { recursive: true });
 * ```
 */
export async function runsInDirectory(root: string): Promise<RunInfo[]> {
  const out: RunInfo[] = [];
  const visit = async (rel: string, depth: number) => {
    const dir = rel ? `${root}/${rel}` : root;
    let entries: Deno.DirEntry[];
    try {
      entries = [];
      for await (const e of Deno.readDir(dir)) entries.push(e);
    } catch {
      return;
    }
    entries.sort((a, b) => a.name < b.name ? -1 : a.name > b.name ? 1 : 0);
    if (rel && entries.some((e) => e.isFile && e.name === "metrics.jsonl")) {
      const cell = await readJson(`${dir}/cell.json`);
      const config = await readJson(`${dir}/config.json`) ??
        (cell?.config && typeof cell.config === "object"
          ? cell.config as Record<string, unknown>
          : null);
      const slash = rel.lastIndexOf("/");
      out.push({
        id: `dir:${rel}`,
        name: rel.slice(slash + 1),
        source: "dir",
        grid: slash > 0 ? rel.slice(0, slash) : null,
        config,
        done: await readJson(`${dir}/done.json`),
        steps: await readSteps(`${dir}/metrics.jsonl`),
        evals: [],
      });
      return;
    }
    if (depth >= 2) return;
    for (const e of entries) {
      if (out.length >= MAX_RUNS) return;
      if (e.isDirectory && !e.name.startsWith(".") && e.name !== "checkpoints") {
        await visit(rel ? `${rel}/${e.name}` : e.name, depth + 1);
      }
    }
  };
  await visit("", 0);
  return out;
}

/** Runs that reported `train_step` events to this gateway (one per reporting rollout). */
export async function runsInGateway(store: Store, index: RunIndex): Promise<RunInfo[]> {
  const out: RunInfo[] = [];
  for (const [rolloutId, steps] of index.stepsByRollout) {
    const rollout = await store.getRollout(rolloutId);
    const name = rollout?.labels.run ?? rolloutId;
    out.push({
      id: `gw:${rolloutId}`,
      name,
      source: "gateway",
      grid: null,
      config: rollout && Object.keys(rollout.input as object ?? {}).length
        ? { input: rollout.input }
        : null,
      done: null,
      steps: [...steps.values()].sort((a, b) => a.step - b.step),
      evals: rollout?.labels.run ? await loadEvalPoints(store, 5_000, { run: name }) : [],
    });
  }
  return out;
}

/**
 * Dotted keys whose values differ between configs (missing counts as a value), with each
 * config's value; `same` counts the keys all share.
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * import { configDiff } from "./runs.ts";
 * const d = configDiff([{ lr: 1, algo: { kind: "ppo" }, seed: 0 }, { lr: 1, algo: { kind: "grpo" } }]);
 * assert.deepEqual(d.keys, ["algo.kind", "seed"]);
 * assert.deepEqual(d.values[0], ['"ppo"', '"grpo"']);
 * assert.equal(d.same, 1);
 * ```
 */
export function configDiff(
  configs: readonly (Record<string, unknown> | null)[],
): { keys: string[]; values: string[][]; same: number } {
  const flat = configs.map((c) => {
    const out = new Map<string, string>();
    const walk = (v: unknown, key: string) => {
      if (v && typeof v === "object" && !Array.isArray(v) && Object.keys(v).length) {
        for (const [k, x] of Object.entries(v)) walk(x, key ? `${key}.${k}` : k);
      } else out.set(key, JSON.stringify(v));
    };
    if (c) walk(c, "");
    return out;
  });
  const all = [...new Set(flat.flatMap((m) => [...m.keys()]))].sort();
  const keys = all.filter((k) => new Set(flat.map((m) => m.get(k) ?? "–")).size > 1);
  return {
    keys,
    values: keys.map((k) => flat.map((m) => m.get(k) ?? "–")),
    same: all.length - keys.length,
  };
}

/** The name a run has with its seed suffix (`-s<k>`, `-seed<k>`) removed. */
export function settingOf(name: string): string {
  return name.replace(/-s(eed)?\d+$/, "");
}

function pooled(values: number[]): { y: number; lo?: number; hi?: number } {
  const { mean, ci95 } = meanCi(values);
  if (!Number.isFinite(ci95)) return { y: mean };
  return { y: mean, lo: mean - ci95, hi: mean + ci95 };
}

type Metric = "reward" | "eval" | "entropy" | "alignment";

function metricPoints(run: RunInfo, metric: Metric): SeriesPoint[] {
  const out: SeriesPoint[] = [];
  if (metric === "eval" && run.evals.length) {
    return run.evals.map((e) => ({ x: e.step, series: run.name, y: e.mean, lo: e.lo, hi: e.hi }));
  }
  for (const s of run.steps) {
    const field = metric === "reward"
      ? "reward_mean"
      : metric === "eval"
      ? "val_reward"
      : metric === "entropy"
      ? "entropy"
      : "alignment_corr";
    const y = s[field];
    if (typeof y !== "number" || !Number.isFinite(y)) continue;
    const std = s.reward_std;
    const n = s.rollouts;
    if (metric === "reward" && typeof std === "number" && typeof n === "number" && n > 1) {
      const half = ci95HalfWidth(std, n);
      out.push({ x: s.step, series: run.name, y, lo: y - half, hi: y + half });
    } else out.push({ x: s.step, series: run.name, y });
  }
  return out;
}

/** Points of `metric` for the chosen runs, or per setting pooled over seeds. */
export function overlayPoints(
  runs: readonly RunInfo[],
  metric: Metric,
  poolSeeds: boolean,
): SeriesPoint[] {
  const perRun = runs.flatMap((r) => metricPoints(r, metric));
  if (!poolSeeds) return perRun;
  const groups = new Map<string, Map<number, number[]>>();
  for (const p of perRun) {
    const key = settingOf(p.series);
    if (!groups.has(key)) groups.set(key, new Map());
    const byStep = groups.get(key)!;
    if (!byStep.has(p.x)) byStep.set(p.x, []);
    byStep.get(p.x)!.push(p.y);
  }
  const out: SeriesPoint[] = [];
  for (const [series, byStep] of groups) {
    for (const [x, values] of byStep) out.push({ x, series, ...pooled(values) });
  }
  return out;
}

/** What the runs page shows (query-string values). */
export interface RunsView {
  selected: string[];
  grid: string | null;
  smoothing: number;
  poolSeeds: boolean;
}

/** Parses the runs page's query string. */
export function runsView(params: URLSearchParams): RunsView {
  const s = Number(params.get("smooth") ?? 0);
  return {
    selected: params.getAll("run").filter((r) => r.length <= 400),
    grid: params.get("grid") || null,
    smoothing: Number.isFinite(s) && s >= 0 && s < 1 ? s : 0,
    poolSeeds: params.get("pool") === "seeds",
  };
}

function runLink(base: string, run: RunInfo): string {
  return `${base}/runs?run=${encodeURIComponent(run.id)}`;
}

/** The runs page body. */
export function runsFragment(base: string, runs: readonly RunInfo[], view: RunsView): SafeHtml {
  const grids = [...new Set(runs.map((r) => r.grid).filter((g): g is string => g !== null))];
  const chosen = runs.filter((r) =>
    view.selected.includes(r.id) || (view.grid !== null && r.grid === view.grid)
  );
  const shown = chosen.length ? chosen : runs.slice(0, 8);
  const last = (r: RunInfo) => r.steps.at(-1);
  const rows = runs.map((r) =>
    html`
      <tr data-run="${r.id}">
        <td><input type="checkbox" name="run" value="${r.id}" ${shown.includes(r)
          ? "checked"
          : ""}></td>
        <td><a href="${runLink(base, r)}">${r.name}</a></td>
        <td>${r.grid
          ? html`<a href="${base}/runs?grid=${encodeURIComponent(r.grid)}">${r.grid}</a>`
          : r.source}</td>
        <td class="num">${r.steps.length}</td>
        <td class="num">${fmtNum(last(r)?.reward_mean)}</td>
        <td class="num">${fmtNum(
          (r.done?.final_val_reward as number | undefined) ?? r.evals.at(-1)?.mean ??
            (last(r)?.val_reward as number | undefined),
        )}</td>
        <td>${r.source === "gateway"
          ? html`<a href="${base}/rollouts?run=${encodeURIComponent(r.name)}">rollouts</a>`
          : ""}</td>
      </tr>
    `
  );
  const gridLinks = grids.length
    ? html`<p id="grids">experiment grids: ${
      grids.map((g, k) =>
        html`${k ? " · " : ""}<a href="${base}/runs?grid=${encodeURIComponent(g)}">${g}</a> (${
          runs.filter((r) => r.grid === g).length
        } runs)`
      )
    }</p>`
    : "";
  const table = html`
    <form method="get" action="${base}/runs" id="run-picker">
      <div class="scroll-x">
        <table id="runs">
          ${tableHead(["", "run", "grid / source", { num: "steps" }, { num: "last reward" }, {
            num: "eval reward",
          }, ""])}
          <tbody>${rows}</tbody>
        </table>
      </div>
      <div
        class="filters"><label>smoothing <select name="smooth" id="f-smooth">${SMOOTHING_CHOICES
          .map((s) =>
            html`<option value="${s}" ${s === view.smoothing ? "selected" : ""}>${
              s === 0 ? "none" : `EMA ${s}`
            }</option>`
          )}</select></label>
    <label class="check"><input type="checkbox" name="pool" value="seeds" id="f-pool" ${view
        .poolSeeds
      ? "checked"
      : ""}> pool seeds (mean, 95% t interval)</label>
    <button type="submit" id="compare">Compare</button></div>
    </form>
  `;
  if (!runs.length) {
    return html`<p class="muted" id="no-runs">No runs yet: start the UI with a runs directory
(<code>deno task ui --runs-dir runs</code>, or <code>experiments/results</code>), or run a
training loop against this gateway.</p>`;
  }
  const chart = (metric: Metric, title: string, note?: string) =>
    lineChart(overlayPoints(shown, metric, view.poolSeeds), {
      title,
      smoothing: view.smoothing,
      id: `runs-${metric}`,
      width: 520,
      height: 280,
      ...(note ? { note } : {}),
    });
  const diff = configDiff(shown.map((r) => r.config));
  const diffTable = html`<h2>Config differences</h2>
<p class="muted">${diff.keys.length} differing key(s), ${diff.same} identical.</p>
${
    diff.keys.length
      ? html`
        <div class="scroll-x">
          <table id="config-diff">
            <thead>
              <tr><th>key</th>${shown.map((r) => html`<th>${r.name}</th>`)}</tr>
            </thead>
            <tbody>${diff.keys.map((k, i) =>
              html`<tr><td><code>${k}</code></td>${
                diff.values[i].map((v) => html`<td><code>${v}</code></td>`)
              }</tr>`
            )}</tbody>
          </table>
        </div>
      `
      : ""
  }`;
  const summary = shown.some((r) => r.done)
    ? html`
      <h2>Results</h2>
      <div class="scroll-x">
        <table id="run-results">
          <thead>
            <tr><th>run</th>${[...new Set(shown.flatMap((r) => Object.keys(r.done ?? {})))].map((
              k,
            ) => html`<th>${k}</th>`)}</tr>
          </thead>
          <tbody>${shown.map((r) =>
            html`<tr><td>${r.name}</td>${
              [...new Set(shown.flatMap((x) => Object.keys(x.done ?? {})))].map((k) =>
                html`<td>${cellText(r.done?.[k])}</td>`
              )
            }</tr>`
          )}</tbody>
        </table>
      </div>
    `
    : "";
  return html`${gridLinks}${table}
<div class="charts wide">
${chart("reward", "train reward", "band: 95% interval of the step's mean over its rollouts")}
${chart("eval", "eval reward")}
${chart("entropy", "entropy")}
${chart("alignment", "rollout–trainer alignment (Pearson)")}
</div>${summary}${diffTable}`;
}
