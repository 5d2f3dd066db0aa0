/**
 * The seeded choices of the pipeline: a sample stratified by repository, the selection after
 * the probe (drop all-solved, keep mixed, add a sample of all-failed), and the train /
 * validation split stratified by repository.
 *
 * @module
 */
import { createHash } from "node:crypto";
import { mulberry32 } from "../util/random.ts";

function rngFor(seed: number, label: string): () => number {
  return mulberry32(createHash("sha256").update(`${seed}\0${label}`).digest().readUInt32LE(0));
}

/** Tasks grouped by repository (repositories sorted; input order within each). */
export function byRepo<T extends { repo: string }>(tasks: T[]): Map<string, T[]> {
  const groups = new Map<string, T[]>();
  for (const task of [...tasks].sort((a, b) => a.repo.localeCompare(b.repo))) {
    const list = groups.get(task.repo) ?? [];
    list.push(task);
    groups.set(task.repo, list);
  }
  return groups;
}

function shuffled<T>(rng: () => number, items: T[]): T[] {
  const out = [...items];
  for (let i = out.length - 1; i > 0; i--) {
    const j = Math.floor(rng() * (i + 1));
    [out[i], out[j]] = [out[j], out[i]];
  }
  return out;
}

/**
 * Largest-remainder shares of `n` over groups of the given sizes (each ≤ its size).
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * import { shares } from "./select.ts";
 * assert.deepEqual(shares([10, 10, 5], 5), [2, 2, 1]);
 * assert.deepEqual(shares([1, 1], 5), [1, 1]);
 * ```
 */
export function shares(sizes: number[], n: number): number[] {
  const total = sizes.reduce((a, b) => a + b, 0);
  if (total === 0 || n <= 0) return sizes.map(() => 0);
  const want = Math.min(n, total);
  const exact = sizes.map((s) => (s * want) / total);
  const out = exact.map((x, i) => Math.min(sizes[i], Math.floor(x)));
  let left = want - out.reduce((a, b) => a + b, 0);
  const order = exact.map((x, i) => [x - Math.floor(x), i] as const).sort((a, b) =>
    b[0] - a[0] || a[1] - b[1]
  );
  while (left > 0) {
    let moved = false;
    for (const [, i] of order) {
      if (left > 0 && out[i] < sizes[i]) {
        out[i]++;
        left--;
        moved = true;
      }
    }
    if (!moved) break;
  }
  return out;
}

/**
 * A seeded sample of `n` tasks stratified by repository (input order kept).
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * import { stratifiedSample } from "./select.ts";
 * const tasks = ["a", "a", "a", "a", "b", "b"].map((repo, i) => ({ repo, instance_id: `t${i}` }));
 * const sample = stratifiedSample(tasks, 3, 0, "x");
 * assert.equal(sample.filter((t) => t.repo === "a").length, 2);
 * assert.deepEqual(stratifiedSample(tasks, 3, 0, "x"), sample); // seeded
 * ```
 */
export function stratifiedSample<T extends { repo: string; instance_id: string }>(
  tasks: T[],
  n: number,
  seed: number,
  label: string,
): T[] {
  const groups = [...byRepo(tasks)];
  const counts = shares(groups.map(([, g]) => g.length), n);
  const chosen = new Set<string>();
  groups.forEach(([repo, group], i) => {
    for (const t of shuffled(rngFor(seed, `${label}\0${repo}`), group).slice(0, counts[i])) {
      chosen.add(t.instance_id);
    }
  });
  return tasks.filter((t) => chosen.has(t.instance_id));
}

/**
 * Train / validation split stratified by repository: `round(fraction × n)` tasks go to
 * validation, shared out over the repositories in proportion to their sizes (largest
 * remainders), each repository's share drawn at random (seeded).
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * import { splitByRepo } from "./select.ts";
 * const tasks = Array.from({ length: 10 }, (_, i) => ({ repo: i < 5 ? "a" : "b", instance_id: `t${i}` }));
 * const split = splitByRepo(tasks, 0.2, 0);
 * const val = tasks.filter((t) => split.get(t.instance_id) === "validation");
 * assert.deepEqual(val.map((t) => t.repo), ["a", "b"]);
 * ```
 */
export function splitByRepo<T extends { repo: string; instance_id: string }>(
  tasks: T[],
  fraction: number,
  seed: number,
): Map<string, "train" | "validation"> {
  const out = new Map<string, "train" | "validation">();
  const groups = [...byRepo(tasks)];
  const counts = shares(groups.map(([, g]) => g.length), Math.round(tasks.length * fraction));
  groups.forEach(([repo, group], i) => {
    shuffled(rngFor(seed, `split\0${repo}`), group).forEach((t, j) => {
      out.set(t.instance_id, j < counts[i] ? "validation" : "train");
    });
  });
  return out;
}
