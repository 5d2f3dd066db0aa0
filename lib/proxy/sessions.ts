/**
 * Conversation and segment tagging. Within one attempt, calls whose leading messages (system
 * prompt(s) and first user message) agree belong to one conversation; different leading
 * messages open a new conversation (a sub-agent or a side conversation such as title
 * generation). Inside a conversation, a call whose history no longer extends the previous
 * call's (earlier turns replaced, e.g. by a summary) opens a new segment (compaction).
 *
 * Conversation ids: the agent's own conversation is `main`, other conversations it opens
 * (sub-agents) are `branch-<n>`, and side conversations a harness opens by itself (OpenCode's
 * title generator, Qwen Code's memory extraction), recognised by their system prompt (see
 * {@link SIDE_CONVERSATIONS}), are `side-<kind>`, whenever they arrive: OpenCode sends its title
 * request before the agent's first call, and first-come naming made that `main`.
 *
 * Each conversation also carries per-conversation state the proxy keeps between turns (the
 * incremental prompt encoder, the last call for substitute mode).
 *
 * @module
 */
import type { ChatMessage, Segment } from "../schema.ts";

/** The last call of a conversation, as substitute mode needs it. */
export interface LastCall {
  messages: ChatMessage[];
  promptIds: Uint32Array;
  responseIds: number[];
  finishReason: "stop" | "length";
  content: string;
  toolCalls: { name: string; arguments: string }[];
}

/** One conversation of an attempt. */
export interface Conversation {
  readonly id: string;
  readonly key: string;
  /** Segment index (compactions so far). */
  segment: number;
  /** Messages of the previous call. */
  lastMessages: ChatMessage[] | null;
  last: LastCall | null;
  /** Opaque per-conversation cache owned by the prompt encoder. */
  encoderState: unknown;
}

/** What {@link SessionTracker.tag} decided for a call. */
export interface Tagged {
  segment: Segment;
  conversation: Conversation;
}

/**
 * System-prompt markers of side conversations harnesses open by themselves, by kind: such a
 * conversation is tagged `side-<kind>` instead of taking the name `main`.
 */
export const SIDE_CONVERSATIONS: Readonly<Record<string, RegExp>> = {
  title: /title generator/i,
  memory: /memory extraction/i,
};

/** The side-conversation kind of a call's messages (by its system prompt), or null. */
export function sideKind(
  messages: ChatMessage[],
  patterns: Readonly<Record<string, RegExp>> = SIDE_CONVERSATIONS,
): string | null {
  const system = messages.filter((m) => m.role === "system").map((m) => m.content ?? "").join("\n");
  if (!system) return null;
  for (const [kind, re] of Object.entries(patterns)) if (re.test(system)) return kind;
  return null;
}

/** The leading messages that identify a conversation, as a comparable key. */
export function conversationKey(messages: ChatMessage[]): string {
  const lead: unknown[] = [];
  for (const m of messages) {
    lead.push([m.role, m.content ?? ""]);
    if (m.role === "user") break;
    if (m.role !== "system") break;
  }
  return JSON.stringify(lead);
}

function sameMessage(a: ChatMessage, b: ChatMessage): boolean {
  if (a.role !== b.role) return false;
  // Assistant turns are compared by role only: harnesses re-serialise them (a response
  // rewrite, which sample assembly diagnoses), and that is not a history replacement.
  if (a.role === "assistant") return true;
  return (a.content ?? "") === (b.content ?? "") &&
    (a.tool_call_id ?? "") === (b.tool_call_id ?? "");
}

/** True when `current` keeps every earlier message of `previous` in place. */
export function extendsHistory(previous: ChatMessage[], current: ChatMessage[]): boolean {
  const n = Math.min(previous.length, current.length);
  for (let i = 0; i < n; i++) if (!sameMessage(previous[i], current[i])) return false;
  return true;
}

interface AttemptState {
  conversations: Map<string, Conversation>;
  /** Agent conversations opened so far (`main`, then `branch-<n>`). */
  count: number;
  /** Side conversations opened so far, by kind. */
  sides: Map<string, number>;
}

/**
 * Tags calls with their conversation and segment, per attempt, with bounded memory.
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * import { SessionTracker } from "./sessions.ts";
 * const sessions = new SessionTracker();
 * const main = [{ role: "system" as const, content: "agent" }, { role: "user" as const, content: "fix it" }];
 * assert.equal(sessions.tag("r1", "a1", main).segment.opened_by, "root");
 * assert.equal(
 *   sessions.tag("r1", "a1", [...main, { role: "assistant" as const, content: "ok" }]).segment.opened_by,
 *   null,
 * );
 * const side = sessions.tag("r1", "a1", [{ role: "user" as const, content: "title?" }]);
 * assert.equal(side.segment.opened_by, "branch");
 * // A title generator is a side conversation even when it comes first:
 * const title = [{ role: "system" as const, content: "You are a title generator." }, main[1]];
 * assert.equal(sessions.tag("r2", "a1", title).segment.conversation, "side-title");
 * assert.equal(sessions.tag("r2", "a1", main).segment.conversation, "main");
 * ```
 */
export class SessionTracker {
  #attempts = new Map<string, AttemptState>();
  readonly #maxAttempts: number;
  readonly #maxConversations: number;
  readonly #sides: Readonly<Record<string, RegExp>>;

  constructor(
    options: {
      maxAttempts?: number;
      maxConversationsPerAttempt?: number;
      /** Side-conversation markers (default {@link SIDE_CONVERSATIONS}; `{}`: none). */
      sideConversations?: Readonly<Record<string, RegExp>>;
    } = {},
  ) {
    this.#maxAttempts = options.maxAttempts ?? 4096;
    this.#maxConversations = options.maxConversationsPerAttempt ?? 256;
    this.#sides = options.sideConversations ?? SIDE_CONVERSATIONS;
  }

  /** Tags a chat call and remembers its messages. */
  tag(rolloutId: string, attemptId: string, messages: ChatMessage[]): Tagged {
    const state = this.#attempt(`${rolloutId}\u0000${attemptId}`);
    const key = conversationKey(messages);
    let conversation = state.conversations.get(key);
    let openedBy: Segment["opened_by"] = null;
    if (!conversation) {
      const side = sideKind(messages, this.#sides);
      let id: string;
      if (side !== null) {
        const n = (state.sides.get(side) ?? 0) + 1;
        state.sides.set(side, n);
        id = n === 1 ? `side-${side}` : `side-${side}-${n}`;
        openedBy = "branch";
      } else {
        id = state.count === 0 ? "main" : `branch-${state.count}`;
        openedBy = state.count === 0 ? "root" : "branch";
        state.count++;
      }
      conversation = {
        id,
        key,
        segment: 0,
        lastMessages: null,
        last: null,
        encoderState: undefined,
      };
      state.conversations.set(key, conversation);
      if (state.conversations.size > this.#maxConversations) {
        state.conversations.delete(state.conversations.keys().next().value!);
      }
    } else {
      // Refresh recency so eviction drops the least recently used conversation.
      state.conversations.delete(key);
      state.conversations.set(key, conversation);
      if (conversation.lastMessages && !extendsHistory(conversation.lastMessages, messages)) {
        conversation.segment++;
        conversation.last = null;
        openedBy = "compaction";
      }
    }
    conversation.lastMessages = messages;
    return {
      conversation,
      segment: { conversation: conversation.id, index: conversation.segment, opened_by: openedBy },
    };
  }

  /** Forgets an attempt (e.g. when it ended). */
  forget(rolloutId: string, attemptId: string): void {
    this.#attempts.delete(`${rolloutId}\u0000${attemptId}`);
  }

  /** Number of attempts tracked. */
  get size(): number {
    return this.#attempts.size;
  }

  #attempt(key: string): AttemptState {
    let state = this.#attempts.get(key);
    if (state) {
      this.#attempts.delete(key);
    } else {
      state = { conversations: new Map(), count: 0, sides: new Map() };
    }
    this.#attempts.set(key, state);
    if (this.#attempts.size > this.#maxAttempts) {
      this.#attempts.delete(this.#attempts.keys().next().value!);
    }
    return state;
  }
}
