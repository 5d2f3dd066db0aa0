/**
 * The non-streaming responder: runs the generation, records the call (served or failed)
 * through the store, then answers in the caller's format.
 *
 * @module
 */
import type { Context } from "hono";
import type { PreparedCall, ProxyContext, RunningCall } from "./call.ts";
import { finishedCall } from "./call.ts";
import type { GenerationOutcome } from "./generation.ts";

/** Answers a cleared call as one JSON body (errors are thrown as `HttpError`s). */
export async function respondJson(
  ctx: ProxyContext,
  c: Context,
  call: PreparedCall,
  running: RunningCall,
): Promise<Response> {
  try {
    let outcome: GenerationOutcome;
    try {
      outcome = await running.run();
    } catch (err) {
      const { record, answer } = running.failed(err);
      await ctx.recorder.record(call, record);
      throw answer;
    }
    await ctx.recorder.record(call, running.served(outcome));
    return c.json(call.codec.respond(finishedCall(ctx, call, outcome), call.request));
  } finally {
    running.cleanup();
  }
}
