/**
 * What differs between the stores' two SQL dialects, and nothing else. Shared statements are
 * written once with `$1, $2, …` placeholders (SQLite reads them as its numbered `?1, ?2, …`);
 * table names, column types, JSON parameters, label lookups, row locks and how a statement
 * takes the next store-wide `seq` come from the {@link Dialect}.
 *
 * @module
 */

/** A value bound to a statement parameter. */
export type SqlParam = string | number | null | Uint8Array;

/** Appends a value to a parameter list and answers its placeholder (`$n`). */
export type Binder = (value: SqlParam) => string;

/**
 * A binder over `params`.
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * import { binder, type SqlParam } from "./dialect.ts";
 * const params: SqlParam[] = ["r1"];
 * const p = binder(params);
 * assert.equal(`mode = ${p("train")}`, "mode = $2");
 * assert.deepEqual(params, ["r1", "train"]);
 * ```
 */
export function binder(params: SqlParam[]): Binder {
  return (value) => {
    params.push(value);
    return `$${params.length}`;
  };
}

/** The logical tables of a store. */
export type TableName = "rollouts" | "attempts" | "events" | "models" | "meta" | "migrations";

/** One SQL dialect of the stores. */
export interface Dialect {
  readonly kind: "sqlite" | "postgres";
  /** Physical table names (PostgreSQL prefixes them `reins_`: they share a database). */
  readonly table: Readonly<Record<TableName, string>>;
  /** Column types that are spelled differently. */
  readonly type: Readonly<{ real: string; blob: string; bigint: string; labels: string }>;
  /** A parameter holding JSON text, as the JSON value a column or function wants. */
  json(param: string): string;
  /** A subquery over the strings of a JSON-array parameter (for `x IN (…)`). */
  textsOf(param: string): string;
  /** The condition "label `key` of the row is `value`". */
  label(p: Binder, key: string, value: string): string;
  /** Row-lock clauses; empty in SQLite, whose one writer holds the whole database. */
  readonly forUpdate: string;
  readonly skipLocked: string;
  /** Statement that orders `seq` assignment by commit (PostgreSQL's advisory lock), or null. */
  readonly lockSeq: string | null;
  /** Statement run before each insert that takes a `seq` (SQLite's counter), or null. */
  readonly bumpSeq: string | null;
  /** The expression of the `seq` an insert takes. */
  readonly seq: string;
  /** How a new rollout gets its listing position (a column and value prefix, or nothing). */
  readonly pos: Readonly<{ column: string; value: string }>;
  /** Query answering the last assigned `seq` as `n`. */
  readonly lastSeq: string;
}

/** Key of PostgreSQL's advisory lock that orders `seq` assignment ("rein"). */
export const SEQ_LOCK = 0x7265696e;
/** Key of PostgreSQL's advisory lock held while migrating the schema. */
export const MIGRATE_LOCK = 0x7265696d;

/** The embedded store's dialect (`node:sqlite`). */
export const SQLITE: Dialect = {
  kind: "sqlite",
  table: {
    rollouts: "rollouts",
    attempts: "attempts",
    events: "events",
    models: "models",
    meta: "meta",
    migrations: "schema_migrations",
  },
  type: { real: "REAL", blob: "BLOB", bigint: "INTEGER", labels: "TEXT" },
  json: (param) => param,
  textsOf: (param) => `SELECT value FROM json_each(${param})`,
  label: (p, key, value) =>
    `json_extract(labels, ${p(`$."${key.replaceAll('"', '""')}"`)}) = ${p(value)}`,
  forUpdate: "",
  skipLocked: "",
  lockSeq: null,
  bumpSeq: "UPDATE counters SET value = value + 1 WHERE name = 'seq'",
  seq: "(SELECT value FROM counters WHERE name = 'seq')",
  pos: { column: "", value: "" },
  lastSeq: "SELECT value AS n FROM counters WHERE name = 'seq'",
};

/** The shared store's dialect (`npm:postgres`). */
export const POSTGRES: Dialect = {
  kind: "postgres",
  table: {
    rollouts: "reins_rollouts",
    attempts: "reins_attempts",
    events: "reins_events",
    models: "reins_models",
    meta: "reins_meta",
    migrations: "reins_schema_migrations",
  },
  type: { real: "double precision", blob: "bytea", bigint: "bigint", labels: "jsonb" },
  json: (param) => `${param}::text::jsonb`,
  textsOf: (param) => `SELECT jsonb_array_elements_text(${param}::text::jsonb)`,
  label: (p, key, value) => `labels ->> ${p(key)} = ${p(value)}`,
  forUpdate: " FOR UPDATE",
  skipLocked: " FOR UPDATE SKIP LOCKED",
  lockSeq: `SELECT pg_advisory_xact_lock(${SEQ_LOCK})`,
  bumpSeq: null,
  seq: "nextval('reins_seq')",
  pos: { column: "pos, ", value: "nextval('reins_seq'), " },
  lastSeq: `SELECT GREATEST(
    (SELECT COALESCE(MAX(seq), 0) FROM reins_events),
    (SELECT COALESCE(MAX(seq), 0) FROM reins_models)) AS n`,
};

/**
 * Rewrites `$n` placeholders as SQLite's numbered `?n` (same binding by position).
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * import { sqliteText } from "./dialect.ts";
 * assert.equal(sqliteText("x = $1 AND y IN ($2, $1)"), "x = ?1 AND y IN (?2, ?1)");
 * ```
 */
export function sqliteText(sql: string): string {
  return sql.replace(/\$(\d+)/g, "?$1");
}
