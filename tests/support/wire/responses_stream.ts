/**
 * Checks a streamed OpenAI Responses answer against the OpenResponses specification: every event
 * matches its schema and names itself in the SSE `event:` field, sequence numbers count from 0,
 * the lifecycle runs `response.created`, `response.in_progress`, items, then one terminal event,
 * each item's events are properly nested (added → parts → deltas → done), and the deltas add up
 * to the done events, the done items, and the final response's output.
 *
 * @module
 */
import assert from "node:assert/strict";
import { conform, type SseEvent } from "./conformance.ts";
import {
  type ResponseResource,
  ResponseResource as ResponseResourceSchema,
  StreamEvent,
} from "./openresponses.ts";

/** What a checked stream yields. */
export interface CheckedResponsesStream {
  events: StreamEvent[];
  final: ResponseResource;
  /** Per output index: the text deltas, and the logprobs the deltas carried. */
  text: Map<number, { text: string; logprobs: unknown[] }>;
}

const TERMINAL = new Set(["response.completed", "response.incomplete", "response.failed"]);

/** Validates a whole Responses stream (see the module doc); throws on the first violation. */
export function checkResponsesStream(sse: readonly SseEvent[]): CheckedResponsesStream {
  const events = sse.map((e, i) => {
    const parsed = conform(StreamEvent, JSON.parse(e.data), `event ${i}`);
    assert.equal(e.event, parsed.type, `event ${i}: SSE event name = data.type`);
    assert.equal(parsed.sequence_number, i, `event ${i}: sequence_number`);
    return parsed;
  });
  assert.equal(events[0]?.type, "response.created", "the stream opens with response.created");
  assert.equal(events[1]?.type, "response.in_progress", "then response.in_progress");
  const last = events.at(-1)!;
  assert.ok(TERMINAL.has(last.type), `the stream ends with a terminal event, not ${last.type}`);
  assert.equal(events.filter((e) => TERMINAL.has(e.type)).length, 1, "one terminal event");
  const id = (events[0] as { response: ResponseResource }).response.id;

  const items: unknown[] = [];
  const text = new Map<number, { text: string; logprobs: unknown[] }>();
  let open: {
    index: number;
    id: string;
    type: string;
    part: "none" | "open" | "done";
    delta: string;
    logprobs: unknown[];
    doneText: string | null;
  } | null = null;
  for (const [i, e] of events.slice(2, -1).entries()) {
    const where = `event ${i + 2} (${e.type})`;
    if (e.type === "response.output_item.added") {
      assert.equal(open, null, `${where}: the previous item is closed first`);
      assert.equal(e.output_index, items.length, `${where}: output_index counts items`);
      open = {
        index: e.output_index,
        id: e.item.id,
        type: e.item.type,
        part: "none",
        delta: "",
        logprobs: [],
        doneText: null,
      };
      continue;
    }
    assert.ok(open, `${where}: inside an item`);
    assert.ok("output_index" in e, `${where}: not a lifecycle event`);
    assert.equal(e.output_index, open.index, `${where}: output_index of the open item`);
    if ("item_id" in e) assert.equal(e.item_id, open.id, `${where}: item_id of the open item`);
    switch (e.type) {
      case "response.content_part.added":
        assert.equal(open.part, "none", `${where}: one content part`);
        assert.equal(e.content_index, 0, where);
        open.part = "open";
        break;
      case "response.output_text.delta":
      case "response.reasoning_text.delta":
        assert.equal(open.part, "open", `${where}: inside the content part`);
        assert.equal(open.doneText, null, `${where}: before the text's done event`);
        open.delta += e.delta;
        if (e.type === "response.output_text.delta") open.logprobs.push(...e.logprobs);
        break;
      case "response.output_text.done":
      case "response.reasoning_text.done":
        assert.equal(e.text, open.delta, `${where}: the deltas add up to the text`);
        if (e.type === "response.output_text.done") {
          assert.deepEqual(e.logprobs, open.logprobs, `${where}: the deltas' logprobs add up`);
        }
        open.doneText = e.text;
        break;
      case "response.content_part.done": {
        assert.equal(open.part, "open", where);
        assert.equal(open.doneText, open.delta, `${where}: after the text's done event`);
        assert.equal("text" in e.part ? e.part.text : null, open.delta, `${where}: part text`);
        open.part = "done";
        break;
      }
      case "response.function_call_arguments.delta":
        assert.equal(open.type, "function_call", where);
        open.delta += e.delta;
        break;
      case "response.function_call_arguments.done":
        assert.equal(e.arguments, open.delta, `${where}: the deltas add up to the arguments`);
        open.doneText = e.arguments;
        break;
      case "response.output_item.done": {
        const item = e.item;
        assert.equal(item.id, open.id, `${where}: same item id`);
        assert.equal(item.type, open.type, `${where}: same item type`);
        if (item.type === "message" || item.type === "reasoning") {
          assert.equal(open.part, "done", `${where}: the content part was closed`);
          const content = item.type === "message" ? item.content : item.content ?? [];
          const t = content[0] && "text" in content[0] ? content[0].text : null;
          assert.equal(t, open.delta, `${where}: the item's text is the deltas'`);
          if (item.type === "message") {
            text.set(open.index, { text: open.delta, logprobs: open.logprobs });
          }
        } else if (item.type === "function_call") {
          assert.equal(item.arguments, open.delta, `${where}: the item's arguments`);
          assert.equal(item.status, "completed", where);
        }
        items.push(item);
        open = null;
        break;
      }
      default:
        assert.fail(`${where}: unexpected event inside an item`);
    }
  }
  const terminal = last as { type: string; response: ResponseResource };
  const final = conform(ResponseResourceSchema, terminal.response, "the final response");
  assert.equal(final.id, id, "one response id throughout");
  assert.equal(final.status, terminal.type.slice("response.".length), "status = terminal event");
  if (terminal.type !== "response.failed") {
    assert.equal(open, null, "every item was closed");
    assert.deepEqual(final.output, items, "the final output is the done items, in order");
  }
  return { events, final, text };
}
