/**
 * The rollout list's server-side filtering, search, sorting and paging. Filters the store can
 * answer (status, mode, group, the `step` and `role` labels) go to the store; the rest (harness,
 * reward range, flagged, text search) are applied to the store's pages with a bounded scan, so
 * a page never reads more than `scanBudget` rollouts however selective the filter is, and says
 * how far it got. Sorted listings page by key (`(value, rollout_id)` of the last row), never by
 * offset, so rows added meanwhile do not shift a page.
 *
 * @module
 */
import type { ListRolloutsOptions, Store } from "../gateway/store.ts";
import type { Rollout } from "../schema.ts";
import type { RolloutListQuery } from "../schema/ui.ts";
import type { RunIndex } from "./run_index.ts";

/** One page of the filtered list. */
export interface RolloutListPage {
  items: Rollout[];
  /** Cursor of the next page (null: no more rollouts). */
  next: string | null;
  /** Rollouts read to fill this page. */
  scanned: number;
  /** True when the scan budget ran out before the page was full. */
  partial: boolean;
  /** With a text search: each listed rollout's first match with its context. */
  snippets?: Record<string, Snippet>;
}

/** A search match in context (`before` and `after` start/end with `…` when cut). */
export interface Snippet {
  before: string;
  match: string;
  after: string;
}

/** The harness a rollout runs: its `harness` label, else `config.harness.name`. */
export function harnessOf(rollout: Rollout): string | null {
  return rollout.labels.harness ?? rollout.config.harness?.name ?? null;
}

/**
 * The searchable text of a rollout: its input, and of every model call the prompt messages
 * (content, reasoning, tool calls with their arguments), the response text, and every tool
 * call and log event. Cached per rollout until its `updated_at` changes.
 */
export class RolloutText {
  readonly #cache = new Map<string, { updated: number; text: string; lower: string }>();
  readonly #max: number;
  constructor(readonly store: Store, max = 2_000) {
    this.#max = max;
  }

  async of(rollout: Rollout): Promise<string> {
    return (await this.#entry(rollout)).lower;
  }

  async #entry(rollout: Rollout): Promise<{ updated: number; text: string; lower: string }> {
    const hit = this.#cache.get(rollout.rollout_id);
    if (hit && hit.updated === rollout.updated_at) return hit;
    const parts: string[] = [];
    textsOf(rollout.input, parts);
    for (const e of await this.store.listEvents(rollout.rollout_id)) {
      if (e.type === "model_request") {
        const p = e.payload;
        for (const m of p.messages ?? []) {
          parts.push(m.content ?? "", m.reasoning_content ?? "");
          for (const t of m.tool_calls ?? []) parts.push(t.function.name, t.function.arguments);
        }
        if (!p.messages) textsOf(p.request, parts);
        parts.push(p.response_text ?? "");
      } else if (e.type !== "status" && e.type !== "reward") {
        textsOf(e.payload, parts);
      }
    }
    // One space for every run of white space, in both: offsets in `lower` hold in `text`.
    const text = parts.join("\n").replace(/\s+/g, " ");
    const entry = { updated: rollout.updated_at, text, lower: text.toLowerCase() };
    if (entry.lower.length !== text.length) {
      entry.lower = text.replace(/[A-Z]/g, (c) => c.toLowerCase());
    }
    this.#cache.delete(rollout.rollout_id);
    this.#cache.set(rollout.rollout_id, entry);
    if (this.#cache.size > this.#max) this.#cache.delete(this.#cache.keys().next().value!);
    return entry;
  }

  /** The first match of `q` with `width` characters of context each side, or null. */
  async snippet(rollout: Rollout, q: string, width = 50): Promise<Snippet | null> {
    const { text, lower } = await this.#entry(rollout);
    const needle = q.toLowerCase().trim().replace(/\s+/g, " ");
    const at = lower.indexOf(needle);
    if (at < 0 || !needle) return null;
    const from = Math.max(0, at - width);
    const to = Math.min(text.length, at + needle.length + width);
    return {
      before: `${from > 0 ? "…" : ""}${text.slice(from, at)}`,
      match: text.slice(at, at + needle.length),
      after: `${text.slice(at + needle.length, to)}${to < text.length ? "…" : ""}`,
    };
  }

  /** True when `q` occurs (case-insensitive, runs of white space as one) in the rollout's text. */
  async matches(rollout: Rollout, q: string): Promise<boolean> {
    const text = await this.of(rollout);
    return text.includes(q.toLowerCase().trim().replace(/\s+/g, " "));
  }
}

/**
 * The strings (and numbers) inside a JSON value, as they read: not JSON text, whose escapes
 * would hide every `"` and `\\` from a search. Iterative, so no depth can overflow the stack.
 */
function textsOf(value: unknown, out: string[]): void {
  const stack: unknown[] = [value];
  while (stack.length) {
    const v = stack.pop();
    if (typeof v === "string") out.push(v);
    else if (typeof v === "number" || typeof v === "boolean") out.push(String(v));
    else if (Array.isArray(v)) { for (let i = v.length - 1; i >= 0; i--) stack.push(v[i]); }
    else if (typeof v === "object" && v !== null) {
      const entries = Object.entries(v);
      for (let i = entries.length - 1; i >= 0; i--) stack.push(entries[i][1], entries[i][0]);
    }
  }
}

type SortKey = Exclude<RolloutListQuery["sort"], "created">;

function sortValue(r: Rollout, key: string): number {
  switch (key) {
    case "reward":
      return r.reward ?? Number.NEGATIVE_INFINITY;
    case "updated":
      return r.updated_at;
    case "step": {
      const step = Number(r.labels.step);
      return r.labels.step !== undefined && Number.isFinite(step) ? step : -1;
    }
    default:
      return r.attempts.length;
  }
}

/**
 * Lists rollouts matching `query`: in creation order by default, else by its sort key.
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * import { openSqliteStore } from "../gateway/sqlite_store.ts";
 * import { RunIndex } from "./run_index.ts";
 * import { listRolloutPage } from "./query.ts";
 * const store = openSqliteStore(":memory:");
 * await store.createRollouts([{ rollout_id: "r1", input: { q: "two plus two" }, labels: { step: "1" } }]);
 * const index = new RunIndex(store);
 * const page = await listRolloutPage(store, index, {
 *   step: "1", q: "PLUS", order: "newest", sort: "created", limit: 50,
 * });
 * assert.equal(page.items.length, 1);
 * // The searchable text is the rollout's strings themselves (keys and values), not its JSON.
 * assert.deepEqual(page.snippets?.r1, { before: "q two ", match: "plus", after: " two" });
 * await store.close();
 * ```
 */
export async function listRolloutPage(
  store: Store,
  index: RunIndex,
  query: RolloutListQuery,
  scanBudget = 5_000,
  texts: RolloutText = new RolloutText(store),
): Promise<RolloutListPage> {
  const page = await listMatching(store, index, query, scanBudget, texts);
  if (query.q === undefined) return page;
  const snippets: Record<string, Snippet> = {};
  for (const r of page.items) {
    const s = await texts.snippet(r, query.q);
    if (s !== null) snippets[r.rollout_id] = s;
  }
  return { ...page, snippets };
}

async function listMatching(
  store: Store,
  index: RunIndex,
  query: RolloutListQuery,
  scanBudget: number,
  texts: RolloutText,
): Promise<RolloutListPage> {
  const keep = async (r: Rollout): Promise<boolean> => {
    if (query.status && r.status !== query.status) return false;
    if (query.mode && r.mode !== query.mode) return false;
    if (query.group !== undefined && r.group_id !== query.group) return false;
    if (query.step !== undefined && r.labels.step !== query.step) return false;
    if (query.role !== undefined && r.labels.role !== query.role) return false;
    if (query.run !== undefined && r.labels.run !== query.run) return false;
    if (query.harness !== undefined && harnessOf(r) !== query.harness) return false;
    if (query.reward_min !== undefined && (r.reward === null || r.reward < query.reward_min)) {
      return false;
    }
    if (query.reward_max !== undefined && (r.reward === null || r.reward > query.reward_max)) {
      return false;
    }
    const flagged = (index.flags.get(r.rollout_id)?.flags.length ?? 0) > 0;
    if (query.flagged === "yes" && !flagged) return false;
    if (query.flagged === "no" && flagged) return false;
    if (query.q !== undefined && !(await texts.matches(r, query.q))) return false;
    return true;
  };
  // A text search reads every candidate's events: it gets a smaller budget per page.
  const budget = query.q !== undefined ? Math.min(scanBudget, 1_000) : scanBudget;
  const storeFilter: Omit<ListRolloutsOptions, "limit"> = {
    ...(query.status ? { status: query.status } : {}),
    ...(query.mode ? { mode: query.mode } : {}),
    ...(query.group !== undefined ? { group_id: query.group } : {}),
    ...(query.step !== undefined || query.role !== undefined || query.run !== undefined
      ? {
        labels: {
          ...(query.run !== undefined ? { run: query.run } : {}),
          ...(query.step !== undefined ? { step: query.step } : {}),
          ...(query.role !== undefined ? { role: query.role } : {}),
        },
      }
      : {}),
  };

  if (query.sort !== "created") {
    return await sortedPage(store, query, query.sort, storeFilter, keep, budget);
  }

  if (query.flagged === "yes") {
    // The index knows every flagged rollout: page through that list instead of the store.
    let offset = query.after?.startsWith("f:") ? Number(query.after.slice(2)) || 0 : 0;
    const items: Rollout[] = [];
    let scanned = 0;
    while (offset < index.flagged.length && items.length < query.limit && scanned < budget) {
      const rollout = await store.getRollout(index.flagged[offset]);
      offset++;
      scanned++;
      if (rollout && await keep(rollout)) items.push(rollout);
    }
    const more = offset < index.flagged.length;
    return {
      items,
      next: more ? `f:${offset}` : null,
      scanned,
      partial: more && items.length < query.limit,
    };
  }

  const items: Rollout[] = [];
  let after = query.after;
  let scanned = 0;
  let next: string | null = null;
  do {
    // Ask for no more than what is still missing, so that every match of a page fits and the
    // store's cursor stays exact.
    const page = await store.listRollouts({
      ...storeFilter,
      order: query.order === "newest" ? "desc" : "asc",
      ...(after ? { after } : {}),
      limit: query.limit - items.length,
    });
    scanned += page.items.length;
    for (const r of page.items) if (await keep(r)) items.push(r);
    next = page.next_cursor;
    after = next ?? undefined;
  } while (next !== null && items.length < query.limit && scanned < budget);
  return { items, next, scanned, partial: next !== null && items.length < query.limit };
}

/**
 * A page in sort-key order: reads up to `budget` matching candidates (newest first when the
 * budget cannot hold them all), sorts them by `(value, rollout_id)` and returns those after the
 * cursor `k:<value>:<rollout_id>`.
 */
async function sortedPage(
  store: Store,
  query: RolloutListQuery,
  sort: SortKey,
  storeFilter: Omit<ListRolloutsOptions, "limit">,
  keep: (r: Rollout) => Promise<boolean>,
  budget: number,
): Promise<RolloutListPage> {
  const desc = sort.startsWith("-");
  const key = desc ? sort.slice(1) : sort;
  const candidates: Rollout[] = [];
  let after: string | undefined;
  let scanned = 0;
  do {
    const page = await store.listRollouts({
      ...storeFilter,
      order: "desc",
      ...(after ? { after } : {}),
      limit: Math.min(500, budget - scanned),
    });
    scanned += page.items.length;
    for (const r of page.items) if (await keep(r)) candidates.push(r);
    after = page.next_cursor ?? undefined;
  } while (after && scanned < budget);
  const cmp = (a: [number, string], b: [number, string]) =>
    (a[0] - b[0] || (a[1] < b[1] ? -1 : a[1] > b[1] ? 1 : 0)) * (desc ? -1 : 1);
  const keyed = candidates.map((r) => ({
    r,
    k: [sortValue(r, key), r.rollout_id] as [number, string],
  }))
    .sort((a, b) => cmp(a.k, b.k));
  let start = 0;
  const m = query.after?.match(/^k:(-?[0-9.e+-]+|-Infinity):(.*)$/);
  if (m) {
    const cursor: [number, string] = [Number(m[1]), m[2]];
    start = keyed.findIndex((x) => cmp(x.k, cursor) > 0);
    if (start < 0) start = keyed.length;
  }
  const slice = keyed.slice(start, start + query.limit);
  const last = slice.at(-1);
  const more = start + query.limit < keyed.length;
  return {
    items: slice.map((x) => x.r),
    next: more && last ? `k:${last.k[0]}:${last.k[1]}` : null,
    scanned,
    partial: after !== undefined,
  };
}
