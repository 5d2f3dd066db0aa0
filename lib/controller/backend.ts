/**
 * The execution backend contract: the reconciler decides *what* runs, a backend decides *how*
 * (a local process group, a Kubernetes Job). A backend never talks to the gateway's control
 * plane itself; it reports through the handle's `done` promise and the log sink.
 *
 * @module
 */
import type { Attempt, AttemptStatus, JsonObject, Rollout } from "../schema.ts";

/** Everything a backend needs to start one attempt. */
export interface AttemptSpec {
  rollout: Rollout;
  attempt: Attempt;
  /** The attempt's capability token (the harness's API key). */
  token: string;
  /** Base URL of the gateway, e.g. `http://127.0.0.1:8080`. */
  gatewayUrl: string;
  /** Receives harness output as it appears (posted to the gateway as `log` events). */
  log: (chunk: LogChunk) => void;
  /** Byte offsets of each stream already posted (when adopting after a restart). */
  resume?: { stdout: number; stderr: number };
}

/**
 * What every harness is told about its attempt, whatever runs it: the proxy as its OpenAI and
 * Anthropic base URL, its capability token as both API keys, its ids and the gateway. Nothing
 * here lets it post a reward (the token cannot).
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * import { attemptEnv } from "./backend.ts";
 * const env = attemptEnv("http://gw:8080", "r1", "a1", "rk_x");
 * assert.equal(env.OPENAI_BASE_URL, "http://gw:8080/proxy/r1/a1/v1");
 * assert.equal(env.ANTHROPIC_BASE_URL, "http://gw:8080/proxy/r1/a1");
 * assert.equal(env.ANTHROPIC_API_KEY, "rk_x");
 * ```
 */
export function attemptEnv(
  gatewayUrl: string,
  rolloutId: string,
  attemptId: string,
  token: string,
): Record<string, string> {
  const proxy = `${gatewayUrl}/proxy/${rolloutId}/${attemptId}`;
  return {
    OPENAI_BASE_URL: `${proxy}/v1`,
    ANTHROPIC_BASE_URL: proxy,
    OPENAI_API_KEY: token,
    ANTHROPIC_API_KEY: token,
    REINS_ROLLOUT_ID: rolloutId,
    REINS_ATTEMPT_ID: attemptId,
    REINS_GATEWAY_URL: gatewayUrl,
  };
}

/**
 * A piece of harness output. `offset`/`end` (bytes into that stream) make posting idempotent
 * and let a restarted controller resume where the posted log ends.
 */
export interface LogChunk {
  stream: "stdout" | "stderr" | "system";
  offset: number;
  end: number;
  text: string;
}

/** How an attempt ended. */
export interface AttemptOutcome {
  status: Exclude<AttemptStatus, "running">;
  exit_code: number | null;
  error: string | null;
  /** The reward the reward hook computed, if the harness spec has one. */
  reward: number | null;
  /** Execution facts recorded on the attempt (sandbox stages, pid, job name, …). */
  info: JsonObject;
}

/** A running attempt. */
export interface AttemptHandle {
  rollout_id: string;
  attempt_id: string;
  /** Facts the gateway should know while it runs (pid, workdir, job name). */
  info: JsonObject;
  /** Settles once when the attempt ends (never rejects). */
  done: Promise<AttemptOutcome>;
}

/**
 * An execution backend.
 *
 * @example
 * ```ts
 * import type { ExecutionBackend } from "./backend.ts";
 * function describe(backend: ExecutionBackend): string {
 *   return `backend ${backend.name}`;
 * }
 * ```
 */
export interface ExecutionBackend {
  readonly name: string;
  /**
   * Starts an attempt. Throws {@link SpecError} when the rollout's harness spec or template is
   * invalid (the reconciler fails that rollout without retrying and keeps going).
   */
  start(spec: AttemptSpec): Promise<AttemptHandle>;
  /**
   * After a controller restart: returns a handle when the attempt is still alive in this
   * backend (it is adopted, not restarted), or an outcome when it ended while nobody watched,
   * or null when the backend knows nothing of it.
   */
  adopt(spec: AttemptSpec): Promise<AttemptHandle | AttemptOutcome | null>;
  /** Stops an attempt (idempotent); its `done` settles with `status`. */
  kill(attemptId: string, status: "cancelled" | "lost" | "timeout", reason: string): Promise<void>;
  /**
   * Lists attempts this backend still holds resources for (orphans after a restart are killed
   * by the reconciler when the gateway no longer runs them).
   */
  known(): Promise<Array<{ rollout_id: string; attempt_id: string }>>;
  /**
   * Forgets an ended attempt once its outcome is recorded by the gateway (removes its state;
   * until then a restarted controller can still report it).
   */
  release(attemptId: string): Promise<void>;
  /** Releases watchers and timers; running attempts keep running (they can be adopted). */
  close(): Promise<void>;
}

/** A harness spec or template the backend cannot run: the rollout fails, the loop goes on. */
export class SpecError extends Error {
  /** The offending field (e.g. `config.harness.options.command`). */
  readonly field: string;
  constructor(field: string, message: string) {
    super(`${field}: ${message}`);
    this.name = "SpecError";
    this.field = field;
  }
}
