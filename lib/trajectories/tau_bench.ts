/**
 * tau-bench historical trajectories: a JSON list of runs `{task_id, trial, reward, traj[]}`, each
 * `traj` an OpenAI chat history (system policy, user simulator turns, assistant turns with
 * `tool_calls`, `tool` results). Runs of one `task_id` form a GRPO group.
 *
 * Assistant messages are LiteLLM message dumps; reasoning models leave their reasoning in the
 * fields of {@link TAU_BENCH_REASONING_FIELDS} (the gpt-4o runs shipped here have none).
 *
 * @module
 */
import { z } from "zod";
import { parseOrThrow } from "../schema.ts";
import type { Trajectory } from "./schema.ts";
import { logMessage, logTrajectory, RAW_MESSAGE_FIELDS, safeId } from "./common.ts";

/** Where tau-bench's LiteLLM message dumps keep reasoning, in the order they are tried. */
export const TAU_BENCH_REASONING_FIELDS = [
  "reasoning_content",
  "reasoning",
  "thinking_blocks[].thinking",
  "provider_specific_fields.reasoning_content",
] as const;

const TauMessageSchema = z.object({
  role: z.enum(["system", "user", "assistant", "tool"]),
  ...RAW_MESSAGE_FIELDS,
  name: z.string().optional(),
}).passthrough();

const TauRunSchema = z.object({
  task_id: z.union([z.number(), z.string()]),
  trial: z.number().int().optional(),
  reward: z.number(),
  traj: z.array(TauMessageSchema),
}).passthrough();

const TauFileSchema = z.array(TauRunSchema);

/**
 * Converts a parsed tau-bench results file into one trajectory per run.
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * import { parseTauBench } from "./tau_bench.ts";
 * const [t] = parseTauBench([{ task_id: 3, trial: 0, reward: 1, traj: [
 *   { role: "user", content: "hi" }, { role: "assistant", content: "hello" },
 * ] }], "tau-bench/airline.json");
 * assert.deepEqual(
 *   [t.id, t.group_id, t.reward],
 *   ["tau-bench:airline:task3:trial0", "tau-bench:airline:task3", 1],
 * );
 * ```
 */
export function parseTauBench(data: unknown, file: string): Trajectory[] {
  const runs = parseOrThrow(TauFileSchema, data, file);
  const base = file.slice(file.lastIndexOf("/") + 1).replace(/\.json$/, "");
  const seen = new Set<string>();
  return runs.map((run, i) => {
    const group = safeId(`tau-bench:${base}:task${run.task_id}`);
    let id = safeId(`${group}:trial${run.trial ?? 0}`);
    // Files that repeat a (task, trial) pair still get one rollout id per run.
    if (seen.has(id)) id = safeId(`${id}:run${i}`);
    seen.add(id);
    const meta = { id, group_id: group, source: "tau-bench" as const, file, reward: run.reward };
    return logTrajectory(meta, TAU_BENCH_REASONING_FIELDS, run.traj, (raw, reader) => {
      const message = logMessage(raw, reader, { keepNull: true });
      if (raw.role === "tool" && raw.name !== undefined) message.name = raw.name;
      return message;
    });
  });
}
