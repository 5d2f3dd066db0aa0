/**
 * The built-in harness as an in-process runner of the local backend:
 * `new LocalBackend({ inProcess: { builtin: runBuiltinInProcess } })` runs harness specs whose
 * `runner` is `in_process` inside the controller's process, with no Deno start per attempt.
 *
 * The agent still talks to the attempt's proxy over HTTP with the attempt's capability token,
 * so the proxy captures exactly what it captures from a process (same token ids, same events).
 * What the process boundary gave is gone: the harness shares the controller's memory and
 * credentials, and nothing sandboxes it. That is acceptable only for environments whose tools
 * execute no agent-written code and touch no agent-chosen path (`IN_PROCESS_ENVS` in
 * `resolver.ts`), never for `coding` (bash) or `files` (writes files): the resolver refuses
 * those, and the backend refuses `in_process` with the sandbox.
 *
 * @module
 */
import type { InProcessAttempt } from "../../controller/in_process.ts";
import { runBuiltin } from "./main.ts";

/**
 * Runs the built-in harness on one attempt, reading from the attempt what a process reads
 * from its environment.
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * import { runBuiltinInProcess } from "./in_process.ts";
 * const err: string[] = [];
 * const code = await runBuiltinInProcess({
 *   options: { env: "arithmetic" }, input: { nothing: 1 }, env: {}, workdir: ".",
 *   signal: new AbortController().signal, stdout: () => {}, stderr: (t) => err.push(t),
 * });
 * assert.equal(code, 2);
 * assert.match(err.join(""), /input: must be a string or hold a prompt/);
 * ```
 */
export function runBuiltinInProcess(attempt: InProcessAttempt): Promise<number> {
  const env = attempt.env;
  return runBuiltin({
    options: attempt.options,
    input: attempt.input,
    baseUrl: env.OPENAI_BASE_URL,
    apiKey: env.OPENAI_API_KEY,
    model: env.OPENAI_MODEL,
    workdir: attempt.workdir,
    dataDir: env.REINS_ENV_DATA_DIR,
    gatewayUrl: env.REINS_GATEWAY_URL,
    rolloutId: env.REINS_ROLLOUT_ID,
    attemptId: env.REINS_ATTEMPT_ID,
    signal: attempt.signal,
    stdout: attempt.stdout,
    stderr: attempt.stderr,
  });
}
