/**
 * Store operations written once for a synchronous driver (`node:sqlite`) and an asynchronous
 * one (`npm:postgres`): an operation is a generator that yields each statement it needs and
 * receives that statement's rows. {@link runSync} feeds it inside a SQLite transaction,
 * {@link runAsync} inside a PostgreSQL one; the SQL and the logic between statements are the
 * same text for both.
 *
 * @module
 */
import type { SqlParam } from "./dialect.ts";

/** One statement of a flow. */
export interface Query {
  sql: string;
  params: SqlParam[];
}

/** An operation that yields statements, receives their rows and returns a `T`. */
export type Flow<T> = Generator<Query, T, unknown>;

/**
 * Runs a statement and returns its rows (none for a statement without `RETURNING`).
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * import { all, runSync } from "./flow.ts";
 * function* count() {
 *   const [row] = yield* all<{ n: number }>("SELECT 2 AS n");
 *   return row.n + 1;
 * }
 * assert.equal(runSync(count(), () => [{ n: 2 }]), 3);
 * ```
 */
export function* all<R>(sql: string, params: SqlParam[] = []): Flow<R[]> {
  return (yield { sql, params }) as R[];
}

/** Drives a flow with a synchronous executor. */
export function runSync<T>(flow: Flow<T>, exec: (query: Query) => unknown[]): T {
  let step = flow.next();
  while (!step.done) step = flow.next(exec(step.value));
  return step.value;
}

/** Drives a flow with an asynchronous executor. */
export async function runAsync<T>(
  flow: Flow<T>,
  exec: (query: Query) => Promise<unknown[]>,
): Promise<T> {
  let step = flow.next();
  while (!step.done) step = flow.next(await exec(step.value));
  return step.value;
}
