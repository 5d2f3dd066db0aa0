/**
 * JSON wire form of stored events. In HTTP responses a `model_request` event's token fields
 * (`prompt_token_ids`, `response_token_ids`, `response_logprobs`) are plain number arrays; in
 * memory and in the stores they are `Uint32Array` / `Float32Array`.
 *
 * @module
 */
import {
  modelRequestFromWire,
  modelRequestToWire,
  type ModelRequestWireSchema,
  type RolloutEvent,
} from "../schema.ts";
import type { z } from "zod";

/** A stored event as JSON: like {@link RolloutEvent} with number arrays for token fields. */
export type WireEvent =
  | (Exclude<RolloutEvent, { type: "model_request" }>)
  | (Omit<Extract<RolloutEvent, { type: "model_request" }>, "payload"> & {
    payload: z.infer<typeof ModelRequestWireSchema>;
  });

/**
 * Converts a stored event to its JSON form.
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * import { eventToWire } from "./wire.ts";
 * const wire = eventToWire({
 *   seq: 1, rollout_id: "r", attempt_id: "a", event_key: null, created_at: 0,
 *   type: "reward", payload: { value: 1, name: "reward", info: {} },
 * });
 * assert.equal(wire.type, "reward");
 * ```
 */
export function eventToWire(event: RolloutEvent): WireEvent {
  if (event.type !== "model_request") return event;
  return { ...event, payload: modelRequestToWire(event.payload) };
}

/** Converts an event's JSON form back to typed arrays (see {@link eventToWire}). */
export function eventFromWire(wire: WireEvent): RolloutEvent {
  if (wire.type !== "model_request") return wire;
  return { ...wire, payload: modelRequestFromWire(wire.payload) };
}
