/**
 * The small events the gateway benches post (`bench:gateway`, `bench:gateway:ab`): a reward, a log
 * line and a custom event, in turn.
 *
 * @module
 */
import type { EventInput } from "../lib/schema.ts";

/** The `i`-th small event of writer `loop`, shifted by `k` within a batch. */
export function smallEvent(loop: number, i: number, k = 0): EventInput {
  switch ((i + k) % 3) {
    case 0:
      return { type: "reward", payload: { value: (loop + i) % 2, name: "pass" } };
    case 1:
      return { type: "log", payload: { stream: "stdout", text: `step ${i}: ran tests, 3 passed` } };
    default:
      return { type: "custom", payload: { name: "tool_call", data: { tool: "bash", ok: true } } };
  }
}
