/**
 * The loop's gateway client across replicated gateways (several gateway processes on one
 * PostgreSQL database, behind a load balancer). Rollouts, events, claims, models and tokens live
 * in the database, so any replica answers any call; the update phase's gate, though, is a
 * per-process hold on the LLM calls each replica proxies. {@link ReplicatedGateway} sends every
 * call through the balancer except the phase switch, which it sends to every replica directly.
 *
 * @module
 */
import { GatewayClient, type GatewayClientOptions, GatewayError } from "../gateway/client.ts";
import type { CallOptions } from "../gateway/client.ts";
import type { Phase, PhaseSnapshot } from "../schema.ts";

/**
 * A {@link GatewayClient} on a load-balanced URL whose `setPhase`/`getPhase` reach every
 * replica. A replica that cannot be reached (it died) is skipped: it proxies no calls; when
 * none answers, the call fails. A replica that starts later starts in the `rollout` phase.
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * import { startGateway } from "../gateway/server.ts";
 * import { ReplicatedGateway } from "./replicas.ts";
 * const key = "ra_doc_example_key";
 * const [a, b] = [await startGateway({ adminKey: key }), await startGateway({ adminKey: key })];
 * const gw = new ReplicatedGateway(a.url, [a.url, b.url], { apiKey: key });
 * assert.equal((await gw.setPhase("update")).phase, "update");
 * assert.equal(b.phase.phase, "update"); // both replicas hold new LLM calls
 * await b.close(); // a replica dies
 * assert.equal((await gw.setPhase("rollout")).phase, "rollout"); // the others still switch
 * assert.equal(a.phase.phase, "rollout");
 * await a.close();
 * ```
 */
export class ReplicatedGateway extends GatewayClient {
  /** One client per replica, on its own URL. */
  readonly replicas: readonly GatewayClient[];

  constructor(baseUrl: string, replicaUrls: readonly string[], options: GatewayClientOptions = {}) {
    super(baseUrl, options);
    if (replicaUrls.length === 0) throw new RangeError("replicaUrls: give at least one replica");
    this.replicas = replicaUrls.map((url) => new GatewayClient(url, { ...options, retries: 1 }));
  }

  /** Every reachable replica's phase, summed: `update` when any replica is in it. */
  override async getPhase(options?: CallOptions): Promise<PhaseSnapshot> {
    return combine(await this.#each((r) => r.getPhase(options)));
  }

  /** Switches every reachable replica; with `drain`, answers once all of them drained. */
  override async setPhase(
    phase: Phase,
    request: { drain?: boolean; drain_timeout_ms?: number } = {},
    options?: CallOptions,
  ): Promise<PhaseSnapshot> {
    return combine(await this.#each((r) => r.setPhase(phase, request, options)));
  }

  async #each(fn: (replica: GatewayClient) => Promise<PhaseSnapshot>): Promise<PhaseSnapshot[]> {
    const settled = await Promise.allSettled(this.replicas.map(fn));
    const out: PhaseSnapshot[] = [];
    let unreachable: unknown = null;
    for (const s of settled) {
      if (s.status === "fulfilled") out.push(s.value);
      else if (s.reason instanceof GatewayError && s.reason.status === 0) unreachable = s.reason;
      else throw s.reason;
    }
    if (out.length === 0) throw unreachable;
    return out;
  }
}

function combine(snapshots: PhaseSnapshot[]): PhaseSnapshot {
  return {
    phase: snapshots.some((s) => s.phase === "update") ? "update" : "rollout",
    in_flight: snapshots.reduce((n, s) => n + s.in_flight, 0),
    held: snapshots.reduce((n, s) => n + s.held, 0),
    since: Math.max(...snapshots.map((s) => s.since)),
  };
}
