/**
 * Schema versions of the stores and the ordered migrations between them. Opening a store runs
 * the migrations its database lacks, in one transaction (under an advisory lock in PostgreSQL,
 * so gateways starting together do not race), and refuses a database whose schema is newer
 * than this code knows: it would otherwise be written with rules it does not follow.
 *
 * A database made before versions were recorded has schema 1's tables and no
 * `schema_migrations` table: migration 1 (all `IF NOT EXISTS`) adopts it as it is.
 *
 * @module
 */
import { StoreError } from "../store.ts";
import type { Dialect } from "./dialect.ts";
import { all, type Flow } from "./flow.ts";
import { schemaV1 } from "./schema.ts";

/** One step of the schema. */
export interface Migration {
  version: number;
  name: string;
  statements(d: Dialect): string[];
}

/** Every migration, oldest first; a database at version n has run the first n. */
export const MIGRATIONS: readonly Migration[] = [
  { version: 1, name: "tables", statements: schemaV1 },
  {
    version: 2,
    name: "reward provenance",
    // The rollout records which attempt and which credential its reward came from. A reward
    // stored before is attributed to the attempt of its last reward event (that event set
    // it); its credential was not recorded, so it stays null.
    statements: (d) => {
      const { rollouts, events } = d.table;
      return [
        `ALTER TABLE ${rollouts} ADD COLUMN reward_attempt_id TEXT`,
        `ALTER TABLE ${rollouts} ADD COLUMN reward_credential TEXT`,
        `UPDATE ${rollouts} SET reward_attempt_id = (
           SELECT e.attempt_id FROM ${events} e
           WHERE e.rollout_id = ${rollouts}.rollout_id AND e.type = 'reward'
           ORDER BY e.seq DESC LIMIT 1)
         WHERE reward IS NOT NULL`,
      ];
    },
  },
  {
    version: 3,
    name: "model-call index",
    // Only model calls are looked up by attempt (a new call's prompt-prefix candidates). The
    // index over every event by (rollout, attempt, type, seq) cost each log, custom and reward
    // event an index write, and a page in each commit; it now holds model calls alone.
    statements: (d) => {
      const prefix = d.kind === "postgres" ? "reins_" : "";
      return [
        `DROP INDEX IF EXISTS ${prefix}events_calls`,
        `CREATE INDEX IF NOT EXISTS ${prefix}events_model_calls ON ${d.table.events}
           (rollout_id, attempt_id, seq) WHERE type = 'model_request'`,
      ];
    },
  },
];

/** The schema version this code writes. */
export const SCHEMA_VERSION: number = MIGRATIONS[MIGRATIONS.length - 1].version;

/** What {@link migrate} did: the version found and the version left. */
export interface MigrationResult {
  from: number;
  to: number;
}

/**
 * Brings the database up to `target` (default {@link SCHEMA_VERSION}); run it inside one
 * write transaction. Refuses (409 naming `schema_version`) a database newer than this code.
 * `where` names the database in that message.
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * import { DatabaseSync } from "node:sqlite";
 * import { SQLITE, sqliteText } from "./dialect.ts";
 * import { runSync } from "./flow.ts";
 * import { migrate, SCHEMA_VERSION } from "./migrations.ts";
 * const db = new DatabaseSync(":memory:");
 * const exec = (q: { sql: string; params: unknown[] }) =>
 *   db.prepare(sqliteText(q.sql)).all(...(q.params as string[]));
 * assert.deepEqual(runSync(migrate(SQLITE, ":memory:"), exec), { from: 0, to: SCHEMA_VERSION });
 * assert.deepEqual(runSync(migrate(SQLITE, ":memory:"), exec), {
 *   from: SCHEMA_VERSION,
 *   to: SCHEMA_VERSION,
 * });
 * ```
 */
export function* migrate(
  d: Dialect,
  where: string,
  target: number = SCHEMA_VERSION,
): Flow<MigrationResult> {
  const table = d.table.migrations;
  yield* all(
    `CREATE TABLE IF NOT EXISTS ${table} (version INTEGER PRIMARY KEY, name TEXT NOT NULL,
       applied_at ${d.type.real} NOT NULL)`,
  );
  const [{ v }] = yield* all<{ v: number | string }>(
    `SELECT COALESCE(MAX(version), 0) AS v FROM ${table}`,
  );
  const from = Number(v);
  if (from > SCHEMA_VERSION) {
    throw new StoreError(
      "conflict",
      `schema_version: ${where} has schema version ${from}, newer than version ` +
        `${SCHEMA_VERSION} that this reins reads and writes; open it with the newer reins ` +
        `that wrote it, or use another database`,
    );
  }
  for (const migration of MIGRATIONS) {
    if (migration.version <= from || migration.version > target) continue;
    for (const statement of migration.statements(d)) yield* all(statement);
    yield* all(`INSERT INTO ${table} (version, name, applied_at) VALUES ($1, $2, $3)`, [
      migration.version,
      migration.name,
      Date.now(),
    ]);
  }
  return { from, to: Math.max(from, Math.min(target, SCHEMA_VERSION)) };
}
