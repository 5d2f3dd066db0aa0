/**
 * The streaming responder (`hono/streaming`): the codec's start events go out at once, output
 * parts follow as tokens arrive, and the closing events are written only after the call was
 * recorded, so a harness never sees the end of a call the store does not hold. A harness that
 * goes away aborts the upstream; the partial call is still recorded.
 *
 * @module
 */
import type { Context } from "hono";
import { stream } from "hono/streaming";
import type { PreparedCall, ProxyContext, RunningCall } from "./call.ts";
import { finishedCall, responseId } from "./call.ts";
import { nowSeconds } from "./codecs/types.ts";

/** Answers a cleared call as the codec's event stream. */
export function respondStream(
  ctx: ProxyContext,
  c: Context,
  call: PreparedCall,
  running: RunningCall,
): Response {
  const encoder = call.codec.stream({
    id: responseId(call),
    model: call.request.model || ctx.options.default_model,
    created: nowSeconds(),
    prompt_tokens: call.promptIds?.length ?? 0,
  }, call.request);
  c.header("content-type", "text/event-stream; charset=utf-8");
  c.header("cache-control", "no-cache");
  c.header("x-accel-buffering", "no");
  return stream(c, async (out) => {
    out.onAbort(() => running.abort());
    const write = (text: string) => text && !out.aborted ? out.write(text) : undefined;
    try {
      await write(encoder.start());
      const outcome = await running.run((parts) => {
        for (const part of parts) write(encoder.part(part));
      });
      await ctx.recorder.record(call, running.served(outcome));
      await write(encoder.finish(finishedCall(ctx, call, outcome)));
    } catch (err) {
      const { record, answer } = running.failed(err);
      try {
        await ctx.recorder.record(call, record);
      } catch (captureErr) {
        console.error(`proxy: cannot record call ${call.callId}: ${(captureErr as Error).message}`);
      }
      await write(encoder.error(answer.status === 499 ? "client disconnected" : answer.message));
    } finally {
      running.cleanup();
    }
  });
}
