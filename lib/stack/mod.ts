/**
 * Assembling a running reins stack: the gateway with the proxy and the Live UI mounted, the one
 * composition root that the service CLIs, the training loop and the tests share.
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * import { startStack } from "./mod.ts";
 * await using stack = await startStack();
 * assert.equal((await fetch(`${stack.url}/v1/health`)).status, 200);
 * ```
 *
 * @module
 */
export { type RunningStack, type StackOptions, startStack } from "./stack.ts";
