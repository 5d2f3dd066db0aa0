/**
 * The curation pipeline (Agent Lightning's SWE-smith recipe): rule stages, an optional seeded
 * sample, the difficulty probe on the real stack (drop all-solved, keep mixed, add a sample of
 * all-failed), a train / validation split stratified by repository, and the outputs: the
 * curated set (JSONL + parquet), every drop with its reason, the probe's per-task outcomes, and
 * a report (funnel, per-repository counts, pass-rate histogram, config and hashes).
 *
 * @module
 */
import { createHash } from "node:crypto";
import {
  type CuratedTask,
  type CurationConfig,
  type CurationConfigInput,
  CurationConfigSchema,
  type FunnelRow,
  parseOrThrow,
  type SweTask,
} from "../schema.ts";
import { writeTaskSet } from "./io.ts";
import { type ProbeOptions, type ProbeResult, type ProbeRun, runProbe } from "./probe.ts";
import { type CurationReport, funnelMarkdown, passRateHistogram } from "./report.ts";
import { byRepo, splitByRepo, stratifiedSample } from "./select.ts";
import { type Drop, ruleStages, type Stage, type StageContext } from "./stages.ts";

/** Options of {@link runCuration}. */
export interface CurationOptions {
  /** Run name (rollout ids, labels, the default output directory `runs/curate/<name>`). */
  name: string;
  config?: CurationConfigInput;
  /** The environment's repositories. */
  reposDir: string;
  outDir?: string;
  /** Where the input came from (recorded in the report). */
  inputPath?: string;
  /** Stages to run instead of the default rule stages. */
  stages?: Stage[];
  /** Probe options beyond the config (a worker, a model). */
  probe?: Pick<ProbeOptions, "model" | "worker">;
  log?: (line: string) => void;
}

/** What {@link runCuration} returns. */
export interface CurationResult {
  config: CurationConfig;
  funnel: FunnelRow[];
  curated: CuratedTask[];
  drops: (Drop & { stage: string })[];
  probe: ProbeRun | null;
  report: CurationReport;
  outDir: string;
}

const sha256 = (text: string) => createHash("sha256").update(text).digest("hex");

function count(drops: Drop[]): Record<string, number> {
  const out: Record<string, number> = {};
  for (const d of drops) out[d.reason] = (out[d.reason] ?? 0) + 1;
  return out;
}

/**
 * Runs the whole pipeline on `input` and writes its outputs.
 *
 * @example
 * ```ts ignore
 * const result = await runCuration(readTaskSet("tasks.jsonl"), {
 *   name: "demo", reposDir: "data/envs/coding/repos", config: { probe: { k: 4 } },
 * });
 * result.funnel.map((row) => `${row.stage}: ${row.out}`);
 * ```
 */
export async function runCuration(
  input: SweTask[],
  options: CurationOptions,
): Promise<CurationResult> {
  const t0 = performance.now();
  const config = parseOrThrow(CurationConfigSchema, options.config ?? {}, "config");
  const outDir = options.outDir ?? `runs/curate/${options.name}`;
  await Deno.mkdir(outDir, { recursive: true });
  const ids = new Set<string>();
  for (const task of input) {
    if (ids.has(task.instance_id)) {
      throw new Error(`input: instance_id ${task.instance_id} appears twice`);
    }
    ids.add(task.instance_id);
  }
  const ctx: StageContext = {
    config,
    reposDir: options.reposDir,
    ...(options.log ? { log: options.log } : {}),
  };
  const funnel: FunnelRow[] = [];
  const drops: (Drop & { stage: string })[] = [];
  const record = (stage: string, description: string, before: number, kept: number, d: Drop[]) => {
    funnel.push({ stage, description, in: before, out: kept, dropped: count(d) });
    drops.push(...d.map((x) => ({ ...x, stage })));
    options.log?.(`${stage}: ${before} -> ${kept}`);
  };
  let tasks = input;
  let sampled = false;
  const sample = () => {
    sampled = true;
    const size = config.sample.size;
    if (size === null || tasks.length <= size) return;
    const chosen = stratifiedSample(tasks, size, config.seed, "sample");
    const keep = new Set(chosen.map((t) => t.instance_id));
    const dropped = tasks.filter((t) => !keep.has(t.instance_id)).map((task) => ({
      task,
      reason: "not_sampled",
      detail: `outside the seeded ${size}-task sample`,
    }));
    record(
      "sample",
      `seeded sample of ${size} before the ${config.sample.before} (stratified by repository)`,
      tasks.length,
      chosen.length,
      dropped,
    );
    tasks = chosen;
  };
  for (const stage of options.stages ?? ruleStages()) {
    if (stage.executes && config.sample.before === "tests" && !sampled) sample();
    if (!stage.enabled(config)) {
      record(stage.name, `${stage.description} (disabled)`, tasks.length, tasks.length, []);
      continue;
    }
    const { kept, dropped } = await stage.run(tasks, ctx);
    record(stage.name, stage.description, tasks.length, kept.length, dropped);
    tasks = kept;
  }
  const afterRules = tasks;
  if (!sampled) sample();

  let probe: ProbeRun | null = null;
  const outcome = new Map<string, ProbeResult>();
  if (config.probe.enabled && tasks.length > 0) {
    probe = await runProbe(tasks, {
      outDir: `${outDir}/probe`,
      reposDir: options.reposDir,
      config,
      name: options.name,
      ...options.probe,
      ...(options.log ? { log: options.log } : {}),
    });
    for (const r of probe.results) outcome.set(r.instance_id, r);
    const dropped: Drop[] = [];
    const mixed: SweTask[] = [];
    const allFailed: SweTask[] = [];
    for (const task of tasks) {
      const r = outcome.get(task.instance_id)!;
      if (r.class === null) {
        dropped.push({
          task,
          reason: "probe_error",
          detail: `${r.errors} of ${r.rollout_ids.length} rollouts did not finish`,
        });
      } else if (r.class === "all_solved") {
        dropped.push({
          task,
          reason: "all_solved",
          detail: `solved ${r.solved}/${r.rewards.length}`,
        });
      } else if (r.class === "mixed") {
        mixed.push(task);
      } else {
        allFailed.push(task);
      }
    }
    const keepFailed = config.probe.all_failed_count ??
      Math.round(config.probe.all_failed_fraction * allFailed.length);
    const failedSample = stratifiedSample(allFailed, keepFailed, config.seed, "all_failed");
    const keptFailed = new Set(failedSample.map((t) => t.instance_id));
    for (const task of allFailed) {
      if (!keptFailed.has(task.instance_id)) {
        dropped.push({
          task,
          reason: "all_failed_not_sampled",
          detail: `failed all ${
            outcome.get(task.instance_id)!.rewards.length
          }; not in the all-failed sample`,
        });
      }
    }
    const kept = tasks.filter((t) => mixed.includes(t) || keptFailed.has(t.instance_id));
    record(
      "probe",
      `difficulty probe (k=${config.probe.k}): drop all-solved, keep mixed + a sample of all-failed`,
      tasks.length,
      kept.length,
      dropped,
    );
    tasks = kept;
  } else {
    record("probe", "difficulty probe (disabled)", tasks.length, tasks.length, []);
  }

  const split = splitByRepo(tasks, config.split.validation_fraction, config.seed);
  const curated: CuratedTask[] = tasks.map((task) => {
    const r = outcome.get(task.instance_id);
    return {
      ...task,
      split: split.get(task.instance_id)!,
      probe_rollouts: r?.rewards.length ?? 0,
      probe_solved: r?.solved ?? 0,
      probe_pass_rate: r ? r.pass_rate : null,
      probe_class: r?.class ?? null,
    };
  });
  const written = await writeTaskSet(`${outDir}/curated`, curated);
  await Deno.writeTextFile(
    `${outDir}/drops.jsonl`,
    drops.map((d) =>
      JSON.stringify({
        instance_id: d.task.instance_id,
        repo: d.task.repo,
        stage: d.stage,
        reason: d.reason,
        detail: d.detail,
      }) + "\n"
    ).join(""),
  );
  if (probe) {
    const repoOf = new Map(input.map((t) => [t.instance_id, t.repo]));
    await Deno.writeTextFile(
      `${outDir}/probe.jsonl`,
      probe.results.map((r) => JSON.stringify({ ...r, repo: repoOf.get(r.instance_id) }) + "\n")
        .join(""),
    );
  }

  const configText = JSON.stringify(config);
  const inputSha = sha256(input.map((t) => JSON.stringify(t)).join("\n"));
  const perRepo: CurationReport["per_repo"] = {};
  const bump = (tasksOf: { repo: string }[], key: keyof CurationReport["per_repo"][string]) => {
    for (const [repo, list] of byRepo(tasksOf)) {
      perRepo[repo] ??= { input: 0, after_rules: 0, probed: 0, kept: 0, train: 0, validation: 0 };
      perRepo[repo][key] += list.length;
    }
  };
  bump(input, "input");
  bump(afterRules, "after_rules");
  bump(
    probe
      ? probe.results.map((r) => ({
        repo: input.find((t) => t.instance_id === r.instance_id)!.repo,
      }))
      : [],
    "probed",
  );
  bump(curated, "kept");
  bump(curated.filter((t) => t.split === "train"), "train");
  bump(curated.filter((t) => t.split === "validation"), "validation");
  const classes = { all_solved: 0, mixed: 0, all_failed: 0, error: 0 };
  for (const r of probe?.results ?? []) classes[r.class ?? "error"]++;
  const report: CurationReport = {
    name: options.name,
    input: { path: options.inputPath ?? null, tasks: input.length, sha256: inputSha },
    config,
    config_sha256: sha256(configText),
    funnel,
    per_repo: Object.fromEntries(Object.entries(perRepo).sort(([a], [b]) => a.localeCompare(b))),
    probe: probe
      ? {
        policy: probe.policy,
        k: config.probe.k,
        tasks: probe.results.length,
        rollouts: probe.rollouts,
        reused: probe.reused,
        finished: probe.results.reduce((a, r) => a + r.rewards.length, 0),
        classes,
        histogram: passRateHistogram(probe.results, config.probe.k),
        gateway_db: probe.gateway_db,
        wall_s: probe.wall_ms / 1000,
      }
      : null,
    splits: {
      train: curated.filter((t) => t.split === "train").length,
      validation: curated.filter((t) => t.split === "validation").length,
    },
    outputs: {
      jsonl: written.jsonl,
      parquet: written.parquet,
      drops: `${outDir}/drops.jsonl`,
      probe: probe ? `${outDir}/probe.jsonl` : null,
      curated_sha256: written.jsonl_sha256,
    },
    hash: sha256(`${sha256(configText)}\0${inputSha}\0${written.jsonl_sha256}`),
    wall_s: (performance.now() - t0) / 1000,
  };
  await Deno.writeTextFile(`${outDir}/report.json`, JSON.stringify(report, null, 2) + "\n");
  await Deno.writeTextFile(`${outDir}/report.md`, funnelMarkdown(report));
  return { config, funnel, curated, drops, probe, report, outDir };
}
