/**
 * The runs a UI knows: every directory holding a `metrics.jsonl` under the runs directory
 * (`runs/`, or an experiment grid in `experiments/results/<grid>/`) and every run that reported
 * `train_step` events to this gateway, with their configs, results and evaluation points; and
 * what tells them apart: the config keys that differ (paths and bookkeeping left out), the
 * setting a run belongs to (its differing keys but the seed) and the label drawn for it.
 *
 * @module
 */
import type { Store } from "../gateway/store.ts";
import { parseJsonlLines } from "../schema.ts";
import { type TrainStepMetrics, TrainStepMetricsSchema } from "../schema/ui.ts";
import { type EvalPoint, loadEvalPoints } from "./overview.ts";
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
  // A bad line is shown on the overview of a live run; here it is skipped.
  for (const line of parseJsonlLines(await Deno.readTextFile(path), TrainStepMetricsSchema)) {
    if ("value" in line) steps.set(line.value.step, line.value);
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
 * Whether a config key is a path or bookkeeping (where a run wrote, its name or id, when it
 * started): such keys differ between any two runs and say nothing about the setting.
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * import { isBookkeepingKey } from "./runs.ts";
 * assert.ok(isBookkeepingKey("out_dir", '"runs/a"'));
 * assert.ok(isBookkeepingKey("harness.data_dir", '"/tmp/x"'));
 * assert.ok(isBookkeepingKey("name", '"grid-a-s0"'));
 * assert.ok(isBookkeepingKey("cell.id", '"a-s0"'));
 * assert.ok(!isBookkeepingKey("advantage.normalization", '"token_mean"'));
 * assert.ok(!isBookkeepingKey("seed", "3"));
 * ```
 */
export function isBookkeepingKey(key: string, value: string): boolean {
  const last = key.slice(key.lastIndexOf(".") + 1);
  if (
    /^(name|id|run|run_id|out_dir|outdir|dir|path|file|created_at|started_at|finished_at|time|timestamp|host|hostname|git|commit|version_hash)$/
      .test(last)
  ) return true;
  if (/(_dir|_path|_file|_url)$/.test(last)) return true;
  // A value that is an absolute or run-relative path.
  return /^"(\/|\.{1,2}\/|runs\/|experiments\/)/.test(value);
}

/** Seed keys: they separate repeats of one setting. */
export function isSeedKey(key: string): boolean {
  return /(^|\.)(seed|seeds|rep|repeat)$/.test(key);
}

/** What tells runs apart. */
export interface ConfigDiff {
  /** Differing keys (paths and bookkeeping left out), sorted. */
  keys: string[];
  /** Per key, each run's value (`–` when the run's config lacks it, `?` without a config). */
  values: string[][];
  /** Keys all configs share with one value. */
  same: number;
  /** Keys left out as paths or bookkeeping. */
  ignored: string[];
  /** Runs without a config (left out of the comparison, not counted as differing). */
  missing: number;
}

/**
 * Dotted keys whose values differ between configs (missing counts as a value), with each
 * config's value; `same` counts the keys all share. A run without a config is left out of the
 * comparison (its column reads `?`), so one such run does not make every key "differ"; path
 * and bookkeeping keys are listed apart.
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * import { configDiff } from "./runs.ts";
 * const d = configDiff([
 *   { lr: 1, algo: { kind: "ppo" }, seed: 0, out_dir: "runs/a" },
 *   { lr: 1, algo: { kind: "grpo" }, out_dir: "runs/b" },
 *   null,
 * ]);
 * assert.deepEqual(d.keys, ["algo.kind", "seed"]);
 * assert.deepEqual(d.values[0], ['"ppo"', '"grpo"', "?"]);
 * assert.equal(d.same, 1);
 * assert.deepEqual(d.ignored, ["out_dir"]);
 * assert.equal(d.missing, 1);
 * ```
 */
export function configDiff(configs: readonly (Record<string, unknown> | null)[]): ConfigDiff {
  const flat = configs.map((c) => {
    if (!c) return null;
    const out = new Map<string, string>();
    const walk = (v: unknown, key: string, depth: number) => {
      if (
        v && typeof v === "object" && !Array.isArray(v) && Object.keys(v).length && depth < 6
      ) {
        for (const [k, x] of Object.entries(v)) walk(x, key ? `${key}.${k}` : k, depth + 1);
      } else out.set(key, JSON.stringify(v));
    };
    walk(c, "", 0);
    return out;
  });
  const present = flat.filter((m): m is Map<string, string> => m !== null);
  const all = [...new Set(present.flatMap((m) => [...m.keys()]))].sort();
  const differing = all.filter((k) => new Set(present.map((m) => m.get(k) ?? "–")).size > 1);
  const ignored = differing.filter((k) => present.some((m) => isBookkeepingKey(k, m.get(k) ?? "")));
  const keys = differing.filter((k) => !ignored.includes(k));
  return {
    keys,
    values: keys.map((k) => flat.map((m) => m === null ? "?" : m.get(k) ?? "–")),
    same: all.length - differing.length,
    ignored,
    missing: flat.length - present.length,
  };
}

/** The name a run has with its seed suffix (`-s<k>`, `-seed<k>`) removed. */
export function settingOf(name: string): string {
  return name.replace(/-s(eed)?\d+$/, "");
}

function shortValue(value: string): string {
  const text = value.startsWith('"') ? value.slice(1, -1) : value;
  return text.length > 24 ? `${text.slice(0, 23)}…` : text;
}

/** How each run is labelled and grouped in a comparison. */
export interface RunLabels {
  /** Run id → its label (differing keys and values, seed included). */
  label: Map<string, string>;
  /** Run id → its setting (differing keys but the seed): runs pooled over seeds share it. */
  setting: Map<string, string>;
  diff: ConfigDiff;
}

/**
 * Labels runs by the config keys that differ between them (not by their long names), and
 * groups them into settings (the same label but the seed). Runs without a config, or when no
 * key differs, fall back to their name (setting: the name without a `-s<k>` suffix).
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * import { labelRuns } from "./runs.ts";
 * const run = (id: string, config: Record<string, unknown>) => ({ id, name: `a-very-long-name-${id}`, config });
 * const { label, setting } = labelRuns([
 *   run("1", { norm: "token", seed: 0, out_dir: "runs/1" }),
 *   run("2", { norm: "token", seed: 1, out_dir: "runs/2" }),
 *   run("3", { norm: "seq", seed: 0, out_dir: "runs/3" }),
 * ]);
 * assert.equal(label.get("1"), "norm=token seed=0");
 * assert.equal(setting.get("1"), "norm=token");
 * assert.equal(setting.get("2"), "norm=token");
 * assert.equal(setting.get("3"), "norm=seq");
 * ```
 */
export function labelRuns(
  runs: readonly Pick<RunInfo, "id" | "name" | "config">[],
): RunLabels {
  const diff = configDiff(runs.map((r) => r.config));
  const label = new Map<string, string>();
  const setting = new Map<string, string>();
  runs.forEach((r, i) => {
    const parts = diff.keys.map((k, j) => ({ k, v: diff.values[j][i] }))
      .filter(({ v }) => v !== "?" && v !== "–");
    const keyName = (k: string) => k.slice(k.lastIndexOf(".") + 1);
    const text = (list: typeof parts) =>
      list.map(({ k, v }) => `${keyName(k)}=${shortValue(v)}`).join(" ");
    const settingParts = parts.filter(({ k }) => !isSeedKey(k));
    label.set(r.id, r.config && parts.length ? text(parts) : r.name);
    setting.set(
      r.id,
      r.config && parts.length ? (text(settingParts) || "all") : settingOf(r.name),
    );
  });
  return { label, setting, diff };
}
