/**
 * Per-step metrics: one JSON line per step in `metrics.jsonl`, and the same record as a
 * `train_step` custom event in the gateway (the Live UI's run overview reads it).
 *
 * @module
 */
import { type GatewayClient, GatewayError } from "../gateway/client.ts";
import type { JsonObject, JsonValue } from "../schema.ts";
import { type LoopStepMetrics, LoopStepMetricsSchema } from "./schema.ts";
import { TRAIN_STEP_EVENT } from "../schema/ui.ts";
import { reinsEvent } from "../schema/gateway_api.ts";
import { parseOrThrow } from "../schema.ts";

/** Where the run's bookkeeping events go: a `val` rollout labelled `kind=run`. */
export interface RunRecord {
  rollout_id: string;
  attempt_id: string;
}

/** The UI's shape: optional fields are omitted rather than null. */
function toEventData(metrics: LoopStepMetrics): JsonObject {
  const out: JsonObject = {};
  for (const [key, value] of Object.entries(metrics)) {
    if (value !== null && value !== undefined) out[key] = value as JsonValue;
  }
  return out;
}

/**
 * Opens (creating once) the run's bookkeeping rollout. It is claimed by the loop itself and
 * closed at once, so no controller ever runs it; events can still be posted to its attempt.
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * import { GatewayClient } from "../gateway/client.ts";
 * import { startGateway } from "../gateway/server.ts";
 * import { openRunRecord } from "./metrics.ts";
 * const gw = await startGateway();
 * const gateway = new GatewayClient(gw.url, { apiKey: gw.adminKey });
 * const record = await openRunRecord(gateway, "toy");
 * assert.equal(record.rollout_id, "toy-run");
 * await gw.close();
 * ```
 */
export async function openRunRecord(gateway: GatewayClient, name: string): Promise<RunRecord> {
  const rollout_id = `${name}-run`;
  await gateway.createRollouts([{
    rollout_id,
    group_id: rollout_id,
    input: { run: name },
    mode: "val",
    labels: { kind: "run", run: name },
  }]);
  let rollout = await gateway.getRollout(rollout_id);
  if (rollout.status === "queuing") {
    // Created before any other val rollout of this gateway, so a claim of one val rollout by
    // the loop's own worker name takes exactly it (checked below).
    const claimed = await gateway.claim({
      worker: `${name}-loop`,
      limit: 1,
      lease_ms: 60_000,
      mode: "val",
    });
    for (const c of claimed) {
      if (c.rollout.rollout_id !== rollout_id) {
        await gateway.transition(c.rollout.rollout_id, {
          to: "requeuing",
          attempt_id: c.attempt.attempt_id,
          expected_version: c.rollout.version,
          attempt_status: "cancelled",
        }).catch(() => undefined);
      }
    }
    rollout = await gateway.getRollout(rollout_id);
  }
  const attempt = rollout.attempts.at(-1);
  if (!attempt) throw new Error(`run record ${rollout_id}: could not open an attempt`);
  if (rollout.status === "running") {
    // A controller sharing the gateway may have claimed the record first and be failing it (it
    // has no harness); either way the record is closed and its attempt still takes events.
    await gateway.transition(rollout_id, {
      to: "succeeded",
      attempt_id: attempt.attempt_id,
      expected_version: rollout.version,
      reason: "run record",
    }).catch((err) => {
      if (!(err instanceof GatewayError) || err.status !== 409) throw err;
    });
  }
  return { rollout_id, attempt_id: attempt.attempt_id };
}

/** Writes step metrics to a JSONL file and (optionally) the gateway. */
export class MetricsWriter {
  readonly path: string;
  #gateway: GatewayClient | null;
  #record: RunRecord | null;

  constructor(path: string, gateway: GatewayClient | null = null, record: RunRecord | null = null) {
    this.path = path;
    this.#gateway = gateway;
    this.#record = record;
  }

  /**
   * Keeps only the lines of steps before `nextStep` (a resumed run rewrites the steps it
   * repeats, so every step appears exactly once).
   */
  async truncate(nextStep: number): Promise<LoopStepMetrics[]> {
    const kept = (await readMetrics(this.path)).filter((m) => m.step < nextStep);
    await Deno.writeTextFile(this.path, kept.map((m) => JSON.stringify(m) + "\n").join(""));
    return kept;
  }

  /** Validates and appends one step. */
  async write(metrics: LoopStepMetrics): Promise<void> {
    const parsed = parseOrThrow(LoopStepMetricsSchema, metrics, "metrics");
    await Deno.writeTextFile(this.path, JSON.stringify(parsed) + "\n", { append: true });
    if (this.#gateway && this.#record) {
      // Reserved key: the Live UI trusts step metrics only from reins itself (an agent can
      // post custom events, never under `reins:`). Unique, since a resumed run rewrites steps.
      const id = `${parsed.step}:${crypto.randomUUID()}`;
      await this.#gateway.postEvents(this.#record.rollout_id, this.#record.attempt_id, [
        reinsEvent(TRAIN_STEP_EVENT, id, toEventData(parsed)),
      ]);
    }
  }
}

/**
 * Reads a metrics JSONL file (missing file: no steps).
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * import { readMetrics } from "./metrics.ts";
 * const outDir = await Deno.makeTempDir();
 * const steps = await readMetrics(`${outDir}/metrics.jsonl`);
 * assert.equal(steps.length, 0); // the run has not written a step yet
 * await Deno.remove(outDir);
 * ```
 */
export async function readMetrics(path: string): Promise<LoopStepMetrics[]> {
  let text: string;
  try {
    text = await Deno.readTextFile(path);
  } catch (error) {
    if (error instanceof Deno.errors.NotFound) return [];
    throw error;
  }
  return text.split("\n").filter((l) => l.trim() !== "").map((line, i) =>
    parseOrThrow(LoopStepMetricsSchema, JSON.parse(line), `${path}: line ${i + 1}`)
  );
}
