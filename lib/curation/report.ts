/**
 * The curation report: its shape, the probe's pass-rate histogram and the Markdown funnel.
 *
 * @module
 */
import type { CurationConfig, FunnelRow } from "../schema.ts";

/** One repository's counts through the pipeline. */
export interface RepoCounts {
  input: number;
  /** Out of the last rule stage (a sample before the tests counts). */
  after_rules: number;
  probed: number;
  kept: number;
  train: number;
  validation: number;
}

/** The probe's histogram: tasks by solved fraction (bins `j/k`). */
export interface PassRateHistogram {
  bins: string[];
  counts: number[];
}

/** What `report.json` holds. */
export interface CurationReport {
  name: string;
  input: { path: string | null; tasks: number; sha256: string };
  config: CurationConfig;
  config_sha256: string;
  funnel: FunnelRow[];
  per_repo: Record<string, RepoCounts>;
  probe: {
    policy: string;
    k: number;
    tasks: number;
    rollouts: number;
    /** Of which already in the gateway from an earlier run of the same name (not rerun). */
    reused: number;
    /** Rollouts that finished (succeeded) and count in the pass rates. */
    finished: number;
    classes: { all_solved: number; mixed: number; all_failed: number; error: number };
    histogram: PassRateHistogram;
    gateway_db: string;
    wall_s: number;
  } | null;
  splits: { train: number; validation: number };
  outputs: {
    jsonl: string;
    parquet: string;
    drops: string;
    probe: string | null;
    curated_sha256: string;
  };
  /** SHA-256 over the config's, the input's and the curated set's hashes. */
  hash: string;
  wall_s: number;
}

/**
 * Tasks by pass rate over k rollouts, in k + 1 bins (`0/4` … `4/4`); a task whose rollouts
 * did not all finish falls in the nearest bin; tasks with none finished are left out.
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * import { passRateHistogram } from "./report.ts";
 * const h = passRateHistogram(
 *   [{ pass_rate: 0, rewards: [0, 0] }, { pass_rate: 0.5, rewards: [1, 0] }, { pass_rate: 0.5, rewards: [0, 1] }],
 *   2,
 * );
 * assert.deepEqual(h, { bins: ["0/2", "1/2", "2/2"], counts: [1, 2, 0] });
 * ```
 */
export function passRateHistogram(
  results: { pass_rate: number; rewards: number[] }[],
  k: number,
): PassRateHistogram {
  const counts = new Array(k + 1).fill(0);
  for (const r of results) {
    if (r.rewards.length === 0) continue;
    counts[Math.round(r.pass_rate * k)]++;
  }
  return { bins: counts.map((_, j) => `${j}/${k}`), counts };
}

/** The report as Markdown: funnel, per-repository counts, histogram, outputs. */
export function funnelMarkdown(report: CurationReport): string {
  const lines = [
    `# Curation ${report.name}`,
    "",
    `Input: ${report.input.path ?? "(in memory)"} — ${report.input.tasks} tasks.`,
    "",
    "| stage | what it drops | in | out | dropped (reason: n) |",
    "| --- | --- | ---: | ---: | --- |",
    ...report.funnel.map((row) =>
      `| ${row.stage} | ${row.description} | ${row.in} | ${row.out} | ${
        Object.entries(row.dropped).map(([k, n]) => `${k}: ${n}`).join(", ") || "—"
      } |`
    ),
    "",
    "| repository | input | after rules | probed | kept | train | validation |",
    "| --- | ---: | ---: | ---: | ---: | ---: | ---: |",
    ...Object.entries(report.per_repo).map(([repo, c]) =>
      `| ${repo} | ${c.input} | ${c.after_rules} | ${c.probed} | ${c.kept} | ${c.train} | ${c.validation} |`
    ),
    "",
  ];
  if (report.probe) {
    const p = report.probe;
    lines.push(
      `Probe: ${p.tasks} tasks × k=${p.k} = ${p.rollouts} rollouts (${p.finished} finished` +
        `${p.reused > 0 ? `, ${p.reused} found in the gateway from an earlier run` : ""}), ` +
        `policy: ${p.policy}; all solved ${p.classes.all_solved}, mixed ${p.classes.mixed}, ` +
        `all failed ${p.classes.all_failed}, errors ${p.classes.error}.`,
      "",
      "| pass rate | tasks |",
      "| --- | ---: |",
      ...p.histogram.bins.map((bin, i) => `| ${bin} | ${p.histogram.counts[i]} |`),
      "",
    );
  }
  lines.push(
    `Splits: train ${report.splits.train}, validation ${report.splits.validation}.`,
    "",
    `Outputs: ${report.outputs.jsonl}, ${report.outputs.parquet} (sha256 ` +
      `${report.outputs.curated_sha256.slice(0, 16)}…); pipeline hash ${
        report.hash.slice(0, 16)
      }….`,
    "",
  );
  return lines.join("\n");
}
