/**
 * The rollout list's server-side filtering and paging. Filters the store can answer (status,
 * mode, the `step` label) go to the store; the rest (harness, reward range, flagged) are
 * applied to the store's pages with a bounded scan, so a page never reads more than
 * `scanBudget` rollouts however selective the filter is, and says how far it got.
 *
 * @module
 */
import type { Store } from "../gateway/store.ts";
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
}

/** The harness a rollout runs: its `harness` label, else `config.harness.name`. */
export function harnessOf(rollout: Rollout): string | null {
  return rollout.labels.harness ?? rollout.config.harness?.name ?? null;
}

/**
 * Lists rollouts matching `query`, in creation order.
 *
 * @example
 * ```ts
 * import { openSqliteStore } from "../gateway/sqlite_store.ts";
 * import { RunIndex } from "./run_index.ts";
 * import { listRolloutPage } from "./query.ts";
 * const store = openSqliteStore(":memory:");
 * await store.createRollouts([{ rollout_id: "r1", input: {}, labels: { step: "1" } }]);
 * const index = new RunIndex(store);
 * const page = await listRolloutPage(store, index, { step: "1", order: "oldest", limit: 50 });
 * page.items.length; // 1
 * await store.close();
 * ```
 */
export async function listRolloutPage(
  store: Store,
  index: RunIndex,
  query: RolloutListQuery,
  scanBudget = 5_000,
): Promise<RolloutListPage> {
  const keep = (r: Rollout): boolean => {
    if (query.status && r.status !== query.status) return false;
    if (query.mode && r.mode !== query.mode) return false;
    if (query.step !== undefined && r.labels.step !== query.step) return false;
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
    return true;
  };

  if (query.flagged === "yes") {
    // The index knows every flagged rollout: page through that list instead of the store.
    let offset = query.after?.startsWith("f:") ? Number(query.after.slice(2)) || 0 : 0;
    const items: Rollout[] = [];
    let scanned = 0;
    while (offset < index.flagged.length && items.length < query.limit && scanned < scanBudget) {
      const rollout = await store.getRollout(index.flagged[offset]);
      offset++;
      scanned++;
      if (rollout && keep(rollout)) items.push(rollout);
    }
    const more = offset < index.flagged.length;
    return {
      items,
      next: more ? `f:${offset}` : null,
      scanned,
      partial: more && items.length < query.limit,
    };
  }

  if (query.order === "newest") {
    // Newest first: walk the index's creation list backwards (the store pages oldest first).
    let offset = query.after?.startsWith("n:") ? Number(query.after.slice(2)) || 0 : 0;
    const created = index.created;
    const items: Rollout[] = [];
    let scanned = 0;
    while (offset < created.length && items.length < query.limit && scanned < scanBudget) {
      const rollout = await store.getRollout(created[created.length - 1 - offset]);
      offset++;
      scanned++;
      if (rollout && keep(rollout)) items.push(rollout);
    }
    const more = offset < created.length;
    return {
      items,
      next: more ? `n:${offset}` : null,
      scanned,
      partial: more && items.length < query.limit,
    };
  }

  const postFilter = query.harness !== undefined || query.reward_min !== undefined ||
    query.reward_max !== undefined || query.flagged !== undefined;
  const items: Rollout[] = [];
  let after = query.after;
  let scanned = 0;
  let next: string | null = null;
  do {
    // Ask for no more than what is still missing, so that every match of a page fits and the
    // store's cursor stays exact.
    const page = await store.listRollouts({
      ...(query.status ? { status: query.status } : {}),
      ...(query.mode ? { mode: query.mode } : {}),
      ...(query.step !== undefined ? { labels: { step: query.step } } : {}),
      ...(after ? { after } : {}),
      limit: query.limit - items.length,
    });
    scanned += page.items.length;
    for (const r of page.items) if (!postFilter || keep(r)) items.push(r);
    next = page.next_cursor;
    after = next ?? undefined;
  } while (next !== null && items.length < query.limit && scanned < scanBudget);
  return { items, next, scanned, partial: next !== null && items.length < query.limit };
}
