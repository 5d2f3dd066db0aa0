/**
 * Gateway benchmark over loopback HTTP: the gateway runs as its own process (the CLI), the load
 * comes from this one, as in a real run.
 *
 * Figures:
 * - small-event ingest rate (reward/log/custom events) on SQLite and PostgreSQL, one event per
 *   POST and batches of 50, posted by a keep-alive `GatewayClient` (`keepAlive: true`, reins' own
 *   HTTP/1.1 client); one event per POST also through `fetch` (the `_fetch` lines: the client
 *   every figure used before 2026-12-03's fourth session, and wave 1's), since on a 2-core machine
 *   the client's CPU per call is taken from the gateway's;
 * - model_request ingest with 8k-token prompts (multi-turn: each prompt extends the last);
 * - bytes stored for a 30-turn, 16k-token rollout vs its final context and vs the naive sum of
 *   its prompts.
 *
 * Ends with the contract lines `sqlite_small_events_per_s: <n>`,
 * `postgres_small_events_per_s: <n>` and `storage_ratio_30turn: <x>`.
 *
 * Run: `deno task bench:gateway` (add `--quick` for a short run).
 *
 * @module
 */
import { parseArgs } from "node:util";
import { DatabaseSync } from "node:sqlite";
import { GatewayClient } from "../lib/gateway/client.ts";
import { openSqliteStore } from "../lib/gateway/sqlite_store.ts";
import type { EventInput } from "../lib/schema.ts";
import { spawnGatewayProcess } from "../tests/support/gateway_process.ts";
import { startPostgres } from "../tests/support/postgres.ts";
import { smallEvent } from "./gateway_events.ts";

const QUICK = parseArgs({
  args: Deno.args,
  options: { quick: { type: "boolean", default: false } },
  strict: true,
}).values.quick;
const SECONDS = QUICK ? 1.5 : 4;
/** Writers for batched and model-call figures (one attempt each). */
const CONCURRENCY = 8;
/** Writers for the one-event-per-POST figure: many harnesses posting at once. */
const MANY_WRITERS = 64;
const ADMIN_KEY = "ra_bench_admin_key_0123456789";

interface Rate {
  events_per_s: number;
  requests_per_s: number;
  p50_ms: number;
  p99_ms: number;
}

function quantile(sorted: number[], q: number): number {
  return sorted[Math.min(sorted.length - 1, Math.floor(q * sorted.length))];
}

/** Posts batches from `CONCURRENCY` loops for `SECONDS`; each loop owns one attempt. */
async function ingest(
  client: GatewayClient,
  attempts: Array<{ rollout_id: string; attempt_id: string }>,
  makeBatch: (loop: number, i: number) => EventInput[],
  seconds = SECONDS,
): Promise<Rate> {
  // Acks only (`Prefer: return=minimal`): the writer does not need its events echoed back.
  const latencies: number[] = [];
  let events = 0;
  const started = performance.now();
  const deadline = started + seconds * 1000;
  await Promise.all(attempts.map(async ({ rollout_id, attempt_id }, loop) => {
    for (let i = 0; performance.now() < deadline; i++) {
      const batch = makeBatch(loop, i);
      const t0 = performance.now();
      await client.appendEvents(rollout_id, attempt_id, batch);
      latencies.push(performance.now() - t0);
      events += batch.length;
    }
  }));
  const elapsed = (performance.now() - started) / 1000;
  latencies.sort((a, b) => a - b);
  return {
    events_per_s: Math.round(events / elapsed),
    requests_per_s: Math.round(latencies.length / elapsed),
    p50_ms: Number(quantile(latencies, 0.5).toFixed(2)),
    p99_ms: Number(quantile(latencies, 0.99).toFixed(2)),
  };
}

async function setUpAttempts(
  client: GatewayClient,
  prefix: string,
  n: number,
): Promise<Array<{ rollout_id: string; attempt_id: string }>> {
  await client.createRollouts(
    Array.from({ length: n }, (_, i) => ({ rollout_id: `${prefix}-${i}`, input: i })),
  );
  const out = [];
  while (out.length < n) {
    const claimed = await client.claim({ worker: "bench", limit: n - out.length });
    if (claimed.length === 0) throw new Error("nothing to claim");
    out.push(
      ...claimed.map((c) => ({
        rollout_id: c.rollout.rollout_id,
        attempt_id: c.attempt.attempt_id,
      })),
    );
  }
  return out;
}

/** A multi-turn model call: an 8k-token prompt that extends the loop's previous call. */
function modelCall(loop: number, i: number, promptTokens: number): EventInput {
  const growth = 64;
  const length = promptTokens + i * growth;
  const token = (t: number) => (t * 7919 + loop) % 151_000;
  const prompt = Array.from({ length }, (_, t) => token(t));
  // The response is what the next prompt continues with, so each prompt extends the last.
  const response = Array.from({ length: growth / 2 }, (_, t) => token(length + t));
  return {
    type: "model_request",
    payload: {
      flavor: "openai_chat",
      prompt_token_ids: prompt,
      response_token_ids: response,
      response_logprobs: response.map((_, t) => -0.01 * (t + 1)),
      policy_version: 0,
    },
  };
}

async function runBackend(
  label: string,
  args: string[],
): Promise<Record<string, Rate>> {
  const prefix = label.trim().replace(/[^A-Za-z0-9]/g, "_");
  const gw = await spawnGatewayProcess(["--port", "0", "--lease-sweep-ms", "0", ...args], {
    REINS_ADMIN_KEY: ADMIN_KEY,
  });
  try {
    const client = new GatewayClient(gw.url, { apiKey: ADMIN_KEY, keepAlive: true });
    const out: Record<string, Rate> = {};
    // Warm up the server's JIT.
    await ingest(
      client,
      await setUpAttempts(client, `${prefix}-warm`, CONCURRENCY),
      (l, i) => [smallEvent(l, i, 0)],
      0.5,
    );
    out.small_1 = await ingest(
      client,
      await setUpAttempts(client, `${prefix}-s1`, MANY_WRITERS),
      (l, i) => [smallEvent(l, i, 0)],
    );
    const viaFetch = new GatewayClient(gw.url, { apiKey: ADMIN_KEY });
    out.small_1_fetch = await ingest(
      viaFetch,
      await setUpAttempts(viaFetch, `${prefix}-s1f`, MANY_WRITERS),
      (l, i) => [smallEvent(l, i, 0)],
    );
    out.small_50 = await ingest(
      client,
      await setUpAttempts(client, `${prefix}-s50`, CONCURRENCY),
      (l, i) => Array.from({ length: 50 }, (_, k) => smallEvent(l, i, k)),
    );
    out.model_8k = await ingest(
      client,
      await setUpAttempts(client, `${prefix}-m`, CONCURRENCY),
      (l, i) => [modelCall(l, i, 8_192)],
    );
    for (const [name, rate] of Object.entries(out)) {
      console.log(
        `${label} ${name.padEnd(13)} ${String(rate.events_per_s).padStart(7)} events/s ` +
          `${
            String(rate.requests_per_s).padStart(6)
          } req/s  p50 ${rate.p50_ms} ms  p99 ${rate.p99_ms} ms`,
      );
    }
    await client.close();
    return out;
  } finally {
    await gw.stop("SIGTERM");
  }
}

/**
 * Stores 30-turn rollouts whose final context is 16k tokens and measures the bytes each costs
 * in the SQLite file (growth over an empty store: rows, metadata, indexes and page slack).
 */
async function storage(dir: string): Promise<Record<string, number>> {
  const path = `${dir}/storage.db`;
  const store = openSqliteStore(path);
  await store.createRollouts([{ rollout_id: "baseline", input: 0 }]);
  await store.transition("baseline", { to: "cancelled" });
  const sizeOf = () => {
    const db = new DatabaseSync(path);
    db.exec("PRAGMA wal_checkpoint(TRUNCATE)");
    db.close();
    return Deno.statSync(path).size;
  };
  const empty = sizeOf();
  const rollouts = QUICK ? 20 : 50;
  const turns = 30;
  let sumOfPrompts = 0;
  let finalContext = 0;
  let responseTokens = 0;
  let next = 1;
  for (let r = 0; r < rollouts; r++) {
    await store.createRollouts([{ rollout_id: `s${r}`, input: r }]);
    const [{ attempt }] = await store.claimRollouts({ worker: "w", limit: 1, lease_ms: 60_000 });
    // System prompt + task 1 350 tokens; each turn a 150-token response and a 350-token tool
    // result: the last call's prompt ∥ response is 1 350 + 29 × 500 + 150 = 16 000 tokens.
    let prompt: number[] = Array.from({ length: 1_350 }, () => next++ % 151_000);
    sumOfPrompts = 0;
    responseTokens = 0;
    for (let t = 0; t < turns; t++) {
      const response = Array.from({ length: 150 }, () => next++ % 151_000);
      await store.appendEvents(`s${r}`, attempt.attempt_id, [{
        type: "model_request",
        payload: {
          flavor: "openai_chat",
          prompt_token_ids: prompt,
          response_token_ids: response,
          response_logprobs: response.map(() => -0.5),
          policy_version: 0,
          finish_reason: "tool_calls",
          latency_ms: 250,
          segment: { conversation: "main", index: 0, opened_by: t ? null : "root" },
        },
      }]);
      sumOfPrompts += prompt.length;
      responseTokens += response.length;
      finalContext = prompt.length + response.length;
      prompt = [...prompt, ...response, ...Array.from({ length: 350 }, () => next++ % 151_000)];
    }
    await store.transition(`s${r}`, { to: "succeeded" });
  }
  await store.close();
  const perRollout = (sizeOf() - empty) / rollouts;
  const db = new DatabaseSync(path);
  const blobs = db.prepare(
    `SELECT SUM(LENGTH(prompt_tail) + LENGTH(response_ids) + LENGTH(response_logprobs)) AS b,
      SUM(LENGTH(payload)) AS meta FROM events WHERE type = 'model_request'`,
  ).get() as { b: number; meta: number };
  db.close();
  // The final context as a trainer keeps it: 4 B per token id, 4 B per sampled token's logprob.
  const finalBytes = finalContext * 4 + responseTokens * 4;
  return {
    final_context_tokens: finalContext,
    sum_of_prompts_tokens: sumOfPrompts,
    response_tokens: responseTokens,
    final_context_bytes: finalBytes,
    token_bytes_per_rollout: blobs.b / rollouts,
    meta_bytes_per_rollout: blobs.meta / rollouts,
    file_bytes_per_rollout: perRollout,
    naive_ratio: (sumOfPrompts * 4 + responseTokens * 8) / finalBytes,
    ids_only_ratio: perRollout / (finalContext * 4),
    file_ratio: perRollout / finalBytes,
  };
}

if (import.meta.main) {
  const dir = await Deno.makeTempDir({ prefix: "reins-bench-gw-" });
  try {
    console.log(
      `gateway bench: ${CONCURRENCY} concurrent writers, ${SECONDS}s per figure, ` +
        `${navigator.hardwareConcurrency} cores`,
    );
    const sqlite = await runBackend("sqlite  ", [
      "--db",
      `${dir}/bench.db`,
      "--synchronous",
      "FULL",
    ]);
    const sqliteNormal = await runBackend("sqlite/N", [
      "--db",
      `${dir}/bench-normal.db`,
      "--synchronous",
      "NORMAL",
    ]);
    const pg = await startPostgres({ fsync: true });
    let postgres: Record<string, Rate>;
    try {
      postgres = await runBackend("postgres", ["--postgres", await pg.newDatabase()]);
    } finally {
      await pg.stop();
    }
    const s = await storage(dir);
    console.log(
      `storage (30 turns): final context ${s.final_context_tokens} tokens + ` +
        `${s.response_tokens} logprobs = ${s.final_context_bytes} B; naive sum of prompts ` +
        `${s.sum_of_prompts_tokens} tokens (${s.naive_ratio.toFixed(2)}x); token blobs ` +
        `${Math.round(s.token_bytes_per_rollout)} B, metadata ${
          Math.round(s.meta_bytes_per_rollout)
        } B; ` +
        `SQLite file growth ${Math.round(s.file_bytes_per_rollout)} B/rollout ` +
        `(${s.file_ratio.toFixed(3)}x; ${s.ids_only_ratio.toFixed(3)}x of the ids alone)`,
    );
    console.log(`sqlite_small_events_per_s_unbatched: ${sqlite.small_1.events_per_s}`);
    console.log(`sqlite_normal_small_events_per_s: ${sqliteNormal.small_50.events_per_s}`);
    console.log(`sqlite_normal_small_events_per_s_unbatched: ${sqliteNormal.small_1.events_per_s}`);
    console.log(`postgres_small_events_per_s_unbatched: ${postgres.small_1.events_per_s}`);
    console.log(`sqlite_small_events_per_s_unbatched_fetch: ${sqlite.small_1_fetch.events_per_s}`);
    console.log(
      `sqlite_normal_small_events_per_s_unbatched_fetch: ${sqliteNormal.small_1_fetch.events_per_s}`,
    );
    console.log(
      `postgres_small_events_per_s_unbatched_fetch: ${postgres.small_1_fetch.events_per_s}`,
    );
    console.log(`sqlite_model_request_8k_per_s: ${sqlite.model_8k.events_per_s}`);
    console.log(`postgres_model_request_8k_per_s: ${postgres.model_8k.events_per_s}`);
    console.log(`storage_naive_ratio_30turn: ${s.naive_ratio.toFixed(2)}`);
    console.log(`storage_ids_only_ratio_30turn: ${s.ids_only_ratio.toFixed(3)}`);
    console.log(`sqlite_small_events_per_s: ${sqlite.small_50.events_per_s}`);
    console.log(`postgres_small_events_per_s: ${postgres.small_50.events_per_s}`);
    console.log(`storage_ratio_30turn: ${s.file_ratio.toFixed(3)}`);
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
}
