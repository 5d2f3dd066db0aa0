/**
 * Call selection before merging: attempt filter, failed-call exclusion and retry dedup.
 * Every call left out is returned with a reason, so nothing disappears silently.
 *
 * @module
 */
import type { DroppedCall } from "./schema.ts";
import { sameIds, startsWithConcat } from "./token_seq.ts";
import type { ValidCall } from "./validate.ts";

/** The calls kept for merging (seq order) and the ones left out. */
export interface CallSelection {
  used: ValidCall[];
  dropped: DroppedCall[];
}

/** Cheap prompt fingerprint: length plus a few sampled ids (full equality is checked after). */
function promptKey(ids: Uint32Array): string {
  const n = ids.length;
  let h = n >>> 0;
  const step = Math.max(1, Math.floor(n / 16));
  for (let i = 0; i < n; i += step) h = (Math.imul(h ^ ids[i], 0x9e3779b1) + i) >>> 0;
  for (let i = Math.max(0, n - 8); i < n; i++) h = Math.imul(h ^ ids[i], 0x85ebca6b) >>> 0;
  return `${n}:${h}`;
}

/**
 * Selects the calls that feed the samples.
 *
 * - `finalAttemptId` (when not null) keeps only that attempt's calls;
 * - calls with an `error`, a non-2xx `http_status` or no response token are excluded;
 * - retry dedup: among calls with identical prompt ids only the latest is kept, unless a later
 *   call's prompt extends an earlier one's `prompt ∥ response` exactly (then the harness saw
 *   that response: it was not a retry, and dropping it would lose a real action).
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * import { selectCalls } from "./dedup.ts";
 * const { used, dropped } = selectCalls([], null);
 * assert.equal(used.length + dropped.length, 0);
 * ```
 */
export function selectCalls(
  calls: readonly ValidCall[],
  finalAttemptId: string | null,
): CallSelection {
  const dropped: DroppedCall[] = [];
  const candidates: ValidCall[] = [];
  for (const call of calls) {
    const r = call.request;
    const base = { seq: call.seq, attempt_id: call.attempt_id, superseded_by: null };
    if (finalAttemptId !== null && call.attempt_id !== finalAttemptId) {
      dropped.push({
        ...base,
        reason: "other_attempt",
        detail: `attempt ${call.attempt_id} is not the final attempt ${finalAttemptId}`,
      });
    } else if (r.error !== null && r.error !== undefined) {
      dropped.push({ ...base, reason: "error", detail: `call failed: ${r.error.slice(0, 200)}` });
    } else if (r.http_status < 200 || r.http_status > 299) {
      dropped.push({ ...base, reason: "http_status", detail: `HTTP status ${r.http_status}` });
    } else if (r.response_token_ids.length === 0) {
      dropped.push({ ...base, reason: "empty_response", detail: "no response token" });
    } else {
      candidates.push(call);
    }
  }

  // Walk backwards so that "a later call with the same prompt" is already indexed.
  const keep = new Array<boolean>(candidates.length).fill(true);
  const later = new Map<string, number[]>();
  for (let i = candidates.length - 1; i >= 0; i--) {
    const prompt = candidates[i].request.prompt_token_ids;
    const key = promptKey(prompt);
    const bucket = later.get(key);
    const twin = bucket?.find((j) =>
      keep[j] && sameIds(candidates[j].request.prompt_token_ids, prompt)
    );
    if (twin !== undefined && !extendedLater(candidates, i)) {
      keep[i] = false;
      dropped.push({
        seq: candidates[i].seq,
        attempt_id: candidates[i].attempt_id,
        reason: "retry_duplicate",
        superseded_by: candidates[twin].seq,
        detail: `identical prompt (${prompt.length} tokens) re-sent as seq ${candidates[twin].seq}`,
      });
    }
    if (bucket) bucket.unshift(i);
    else later.set(key, [i]);
  }
  dropped.sort((a, b) => a.seq - b.seq);
  return { used: candidates.filter((_, i) => keep[i]), dropped };
}

function extendedLater(calls: readonly ValidCall[], i: number): boolean {
  const { prompt_token_ids: p, response_token_ids: r } = calls[i].request;
  for (let j = i + 1; j < calls.length; j++) {
    if (startsWithConcat(calls[j].request.prompt_token_ids, p, r)) return true;
  }
  return false;
}
