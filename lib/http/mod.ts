/**
 * The HTTP layer every reins service and client shares: one error type ({@link HttpError}),
 * credentials and auth middleware, byte-counted streaming body limits, per-key concurrency
 * caps, a server with connection deadlines and caps (our own HTTP/1.1 engine, or `node:http`),
 * SSE read and write, one line reader and one retry policy.
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * import { HttpError } from "./mod.ts";
 * const err = new HttpError(413, "body: larger than 1024 bytes", { field: "body" });
 * assert.equal(err.code, "too_large");
 * ```
 *
 * @module
 */
export { type AuthEnv, credentialOf, type RequestCredential, requireCredential } from "./auth.ts";
export { bodyLimits, jsonDepth, limitStream, readJson } from "./body.ts";
export { concurrencyCap, onBodyDone } from "./concurrency.ts";
export {
  codeOfStatus,
  HttpError,
  type HttpErrorCode,
  httpErrorFrom,
  isAbortError,
  statusOf,
  statusOfCode,
  toHttpError,
} from "../util/error.ts";
export { LineSplitter, readLines } from "./lines.ts";
export { backoffDelay, retry } from "./retry.ts";
export { sleep } from "../util/time.ts";
export { type GuardedServer, type ServeEngine, serveGuarded } from "./serve.ts";
export { readSse, sseStream } from "./sse.ts";
