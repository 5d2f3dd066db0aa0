/**
 * Checks a streamed Anthropic Messages answer against the API reference: every event matches its
 * schema and names itself in the SSE `event:` field; the stream runs `message_start`, then each
 * content block as `content_block_start` → deltas of the block's own kind → `content_block_stop`
 * (indexes counting from 0, one block open at a time), then `message_delta` and `message_stop`,
 * with `ping`s anywhere after the start, or ends with an `error` event; and the events fold into
 * the final message.
 *
 * @module
 */
import assert from "node:assert/strict";
import { conform, type SseEvent } from "./conformance.ts";
import { type Message, StreamEvent } from "./anthropic_messages.ts";

/** A checked stream: its events, the message they fold into, and an error if it ended in one. */
export interface CheckedMessageStream {
  events: StreamEvent[];
  message: Message;
  error: { type: string; message: string } | null;
}

const DELTA_FOR: Record<string, string[]> = {
  text: ["text_delta"],
  thinking: ["thinking_delta", "signature_delta"],
  tool_use: ["input_json_delta"],
};

/** Validates and folds a Messages stream (see the module doc). */
export function checkMessageStream(sse: readonly SseEvent[]): CheckedMessageStream {
  const events = sse.map((e, i) => {
    const parsed = conform(StreamEvent, JSON.parse(e.data), `event ${i}`);
    assert.equal(e.event, parsed.type, `event ${i}: SSE event name = data.type`);
    return parsed;
  });
  const first = events[0];
  assert.equal(first?.type, "message_start", "the stream opens with message_start");
  const message = structuredClone((first as { message: Message }).message);
  assert.equal(message.content.length, 0, "message_start has empty content");
  assert.equal(message.stop_reason, null, "no stop reason yet");
  let open: { index: number; type: string; json: string } | null = null;
  let phase = "blocks" as "blocks" | "delta" | "stopped";
  let error: CheckedMessageStream["error"] = null;
  for (const [i, e] of events.slice(1).entries()) {
    const where = `event ${i + 1} (${e.type})`;
    assert.ok(phase !== "stopped" && error === null, `${where}: after the end`);
    switch (e.type) {
      case "ping":
        break;
      case "error":
        error = e.error;
        break;
      case "content_block_start":
        assert.equal(phase, "blocks", where);
        assert.equal(open, null, `${where}: the previous block was stopped`);
        assert.equal(e.index, message.content.length, `${where}: indexes count from 0`);
        message.content.push(structuredClone(e.content_block));
        open = { index: e.index, type: e.content_block.type, json: "" };
        break;
      case "content_block_delta": {
        assert.ok(open && e.index === open.index, `${where}: delta of the open block`);
        assert.ok(
          DELTA_FOR[open.type].includes(e.delta.type),
          `${where}: ${e.delta.type} in a ${open.type} block`,
        );
        const block = message.content[e.index] as Record<string, unknown>;
        const d = e.delta;
        if (d.type === "text_delta") block.text = String(block.text) + d.text;
        else if (d.type === "thinking_delta") block.thinking = String(block.thinking) + d.thinking;
        else if (d.type === "signature_delta") block.signature = d.signature;
        else open.json += d.partial_json;
        break;
      }
      case "content_block_stop":
        assert.ok(open && e.index === open.index, `${where}: stops the open block`);
        if (open.type === "tool_use") {
          (message.content[e.index] as Record<string, unknown>).input = JSON.parse(
            open.json || "{}",
          );
        }
        open = null;
        break;
      case "message_delta":
        assert.equal(open, null, `${where}: every block was stopped`);
        phase = "delta";
        message.stop_reason = e.delta.stop_reason;
        message.stop_sequence = e.delta.stop_sequence;
        message.usage.output_tokens = e.usage.output_tokens;
        break;
      case "message_stop":
        assert.equal(phase, "delta", `${where}: after message_delta`);
        phase = "stopped";
        break;
      default:
        assert.fail(`${where}: unexpected event`);
    }
  }
  if (!error) {
    assert.equal(phase, "stopped", "the stream ends with message_stop");
    assert.ok(message.stop_reason, "a finished message has a stop reason");
  }
  return { events, message, error };
}
