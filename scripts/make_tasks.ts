/**
 * `deno task make-tasks` — the SWE-smith-style generator over the coding environment's
 * pristine repositories: plants AST-level bugs, keeps those with FAIL_TO_PASS and PASS_TO_PASS
 * tests, validates each with and without its gold patch, and writes
 * `data/envs/coding/swesmith.jsonl` (the tasks) and `data/envs/coding/generation.json` (the
 * yield). The same seed writes the same bytes.
 *
 * Flags: `--seed 0`, `--max-per-repo 20`, `--repos a,b` (default: every generator repository),
 * `--out data/envs/coding`.
 *
 * @module
 */
import { parseArgs } from "node:util";
import { intFlag } from "../lib/flags.ts";
import { generateTasks, GENERATOR_REPOS } from "../lib/curation/generate.ts";
import { SWE_TASKS_FILE } from "../lib/harness/envs/coding.ts";

const { values } = parseArgs({
  args: Deno.args,
  options: {
    seed: { type: "string", default: "0" },
    "max-per-repo": { type: "string", default: "20" },
    repos: { type: "string" },
    out: { type: "string", default: new URL("../data/envs/coding", import.meta.url).pathname },
  },
});
const number = (name: string, text: string) => intFlag(name, text, 0)!;
const out = values.out!;
const t0 = performance.now();
const { tasks, report } = await generateTasks({
  reposDir: `${out}/repos`,
  repos: values.repos ? values.repos.split(",") : GENERATOR_REPOS,
  seed: number("seed", values.seed!),
  maxPerRepo: number("max-per-repo", values["max-per-repo"]!),
  log: (line) => console.log(`make-tasks: ${line}`),
});
await Deno.writeTextFile(
  `${out}/${SWE_TASKS_FILE}`,
  tasks.map((t) => JSON.stringify(t) + "\n").join(""),
);
await Deno.writeTextFile(`${out}/generation.json`, JSON.stringify(report, null, 2) + "\n");
console.log(`generator_tried: ${report.tried}`);
console.log(`generator_valid: ${report.valid}`);
console.log(`generator_yield: ${(report.valid / Math.max(1, report.tried)).toFixed(3)}`);
console.log(`generator_wall_s: ${((performance.now() - t0) / 1000).toFixed(1)}`);
console.log(`generator_output: ${out}/${SWE_TASKS_FILE}`);
