/**
 * The stores' tables as schema 1 created them, in either dialect: the first migration (see
 * `./migrations.ts`). Every statement is `IF NOT EXISTS`, so it also adopts a database made
 * before schema versions were recorded, which holds exactly these tables.
 *
 * @module
 */
import type { Dialect } from "./dialect.ts";

/**
 * The DDL of schema 1 (today's tables before schema 2 added the reward's attempt and
 * credential), one statement per entry.
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * import { SQLITE } from "./dialect.ts";
 * import { schemaV1 } from "./schema.ts";
 * assert.ok(schemaV1(SQLITE).some((s) => s.startsWith("CREATE TABLE IF NOT EXISTS rollouts")));
 * ```
 */
export function schemaV1(d: Dialect): string[] {
  const { rollouts, attempts, events, models, meta } = d.table;
  const { real, blob, bigint, labels } = d.type;
  const pg = d.kind === "postgres";
  const prefix = pg ? "reins_" : "";
  return [
    ...(pg ? ["CREATE SEQUENCE IF NOT EXISTS reins_seq"] : []),
    `CREATE TABLE IF NOT EXISTS ${meta} (key TEXT PRIMARY KEY, value TEXT NOT NULL)`,
    ...(pg ? [] : [
      "CREATE TABLE IF NOT EXISTS counters (name TEXT PRIMARY KEY, value INTEGER NOT NULL)",
      "INSERT OR IGNORE INTO counters (name, value) VALUES ('seq', 0)",
    ]),
    `CREATE TABLE IF NOT EXISTS ${rollouts} (
      pos ${pg ? "bigint PRIMARY KEY" : "INTEGER PRIMARY KEY AUTOINCREMENT"},
      rollout_id TEXT NOT NULL UNIQUE,
      group_id TEXT NOT NULL,
      mode TEXT NOT NULL,
      status TEXT NOT NULL,
      version INTEGER NOT NULL,
      input TEXT NOT NULL,
      config TEXT NOT NULL,
      labels ${labels} NOT NULL,
      created_at ${real} NOT NULL,
      updated_at ${real} NOT NULL,
      policy_version_min INTEGER,
      policy_version_max INTEGER,
      reward ${real}
    )`,
    `CREATE INDEX IF NOT EXISTS ${prefix}rollouts_status ON ${rollouts} (status, pos)`,
    `CREATE INDEX IF NOT EXISTS ${prefix}rollouts_group ON ${rollouts} (group_id, pos)`,
    `CREATE TABLE IF NOT EXISTS ${attempts} (
      rollout_id TEXT NOT NULL,
      attempt_id TEXT NOT NULL,
      idx INTEGER NOT NULL,
      status TEXT NOT NULL,
      started_at ${real} NOT NULL,
      ended_at ${real},
      exit_code INTEGER,
      error TEXT,
      worker TEXT,
      lease_expires_at ${real},
      log_location TEXT,
      info TEXT NOT NULL,
      claim_key TEXT,
      PRIMARY KEY (rollout_id, attempt_id)${pg ? ",\n      UNIQUE (rollout_id, idx)" : ""}
    )`,
    ...(pg ? [] : ["CREATE UNIQUE INDEX IF NOT EXISTS attempts_idx ON attempts (rollout_id, idx)"]),
    `CREATE INDEX IF NOT EXISTS ${prefix}attempts_lease ON ${attempts} (status, lease_expires_at)`,
    `CREATE INDEX IF NOT EXISTS ${prefix}attempts_claim ON ${attempts} (worker, claim_key)`,
    `CREATE TABLE IF NOT EXISTS ${events} (
      seq ${pg ? "bigint" : "INTEGER"} PRIMARY KEY,
      rollout_id TEXT NOT NULL,
      attempt_id TEXT NOT NULL,
      type TEXT NOT NULL,
      event_key TEXT,
      created_at ${real} NOT NULL,
      status TEXT,
      payload TEXT NOT NULL,
      prompt_ref ${bigint},
      prompt_ref_len INTEGER,
      prompt_tail ${blob},
      response_ids ${blob},
      response_logprobs ${blob}
    )`,
    `CREATE INDEX IF NOT EXISTS ${prefix}events_rollout ON ${events} (rollout_id, seq)`,
    `CREATE INDEX IF NOT EXISTS ${prefix}events_calls ON ${events} (rollout_id, attempt_id, type, seq)`,
    `CREATE UNIQUE INDEX IF NOT EXISTS ${prefix}events_key ON ${events} (rollout_id, event_key)
      WHERE event_key IS NOT NULL`,
    `CREATE TABLE IF NOT EXISTS ${models} (
      name TEXT PRIMARY KEY,
      endpoints TEXT NOT NULL,
      version INTEGER NOT NULL,
      info TEXT NOT NULL,
      updated_at ${real} NOT NULL,
      seq ${bigint} NOT NULL
    )`,
  ];
}
