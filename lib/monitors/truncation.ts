/**
 * The truncation monitor: flags responses cut off by the length limit.
 *
 * @module
 */
import { type Monitor, withEvidence } from "./types.ts";

/**
 * Flags responses cut off by the token limit (`finish_reason` `length`/`max_tokens`) and calls
 * whose client disconnected before the response ended.
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * import { truncationMonitor } from "./truncation.ts";
 * assert.equal(truncationMonitor().name, "truncation");
 * ```
 */
export function truncationMonitor(): Monitor {
  return {
    name: "truncation",
    check({ events }) {
      const truncated = [];
      const disconnected = [];
      for (const event of events) {
        if (event.type !== "model_request") continue;
        const p = event.payload;
        if (p.finish_reason === "length" || p.finish_reason === "max_tokens") {
          truncated.push({
            seq: event.seq,
            source: "finish_reason",
            excerpt: `${p.finish_reason} after ${p.response_token_ids.length} tokens`,
          });
        }
        if (p.client_disconnected) {
          disconnected.push({
            seq: event.seq,
            source: "client_disconnected",
            excerpt: `client left after ${p.response_token_ids.length} tokens`,
          });
        }
      }
      return withEvidence([
        {
          severity: "warn",
          message: `${truncated.length} response(s) hit the token limit`,
          evidence: truncated,
        },
        {
          severity: "info",
          message: `${disconnected.length} call(s) lost their client mid-response`,
          evidence: disconnected,
        },
      ]);
    },
  };
}
