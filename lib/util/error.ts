/**
 * The one error type of every reins service and client: an HTTP status, a machine-readable
 * code, a message that names the field at fault, and that field. The gateway, the proxy and the
 * UI answer with it; the gateway and trainer clients throw it for error answers (status 0 for a
 * transport failure); the store's and the schemas' errors are subclasses, so one `instanceof`
 * decides the answer.
 *
 * @module
 */

/** Machine-readable error codes (the `code` of an error body). */
export type HttpErrorCode =
  | "invalid"
  | "unauthorized"
  | "forbidden"
  | "not_found"
  | "conflict"
  | "too_large"
  | "too_many_requests"
  | "timeout"
  | "client_closed"
  | "unavailable"
  | "upstream"
  | "internal"
  | "network"
  // Codes other services answer (the trainer worker's `not_initialized`, `non_finite_loss`, …).
  | (string & Record<never, never>);

const CODE_OF_STATUS: Record<number, HttpErrorCode> = {
  0: "network",
  400: "invalid",
  401: "unauthorized",
  403: "forbidden",
  404: "not_found",
  408: "timeout",
  409: "conflict",
  413: "too_large",
  429: "too_many_requests",
  499: "client_closed",
  502: "upstream",
  503: "unavailable",
  504: "timeout",
};

const STATUS_OF_CODE: Record<string, number> = {
  invalid: 400,
  unauthorized: 401,
  forbidden: 403,
  not_found: 404,
  conflict: 409,
  too_large: 413,
  too_many_requests: 429,
  timeout: 504,
  client_closed: 499,
  unavailable: 503,
  upstream: 502,
  internal: 500,
  network: 0,
};

/** The default code of a status (`internal` for unknown 5xx, `invalid` for other 4xx). */
export function codeOfStatus(status: number): HttpErrorCode {
  return CODE_OF_STATUS[status] ?? (status >= 500 ? "internal" : "invalid");
}

/**
 * The status a code maps to (500 for an unknown code).
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * import { statusOfCode } from "./error.ts";
 * assert.equal(statusOfCode("conflict"), 409);
 * ```
 */
export function statusOfCode(code: HttpErrorCode): number {
  return STATUS_OF_CODE[code] ?? 500;
}

/** Optional parts of an {@link HttpError}. */
export interface HttpErrorOptions {
  /** Machine-readable code (default: derived from the status). */
  code?: HttpErrorCode;
  /** The request field at fault (e.g. `events[0].payload.value`). */
  field?: string;
  /** Extra response headers (e.g. `retry-after`). */
  headers?: Record<string, string>;
  cause?: unknown;
}

/**
 * An error answered (or received) as an HTTP status.
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * import { HttpError } from "./error.ts";
 * const err = new HttpError(409, "attempt_id: attempt 'a1' is lost", { field: "attempt_id" });
 * assert.equal(err.code, "conflict");
 * assert.deepEqual(err.toBody(), {
 *   error: { code: "conflict", message: "attempt_id: attempt 'a1' is lost", field: "attempt_id" },
 * });
 * ```
 */
export class HttpError extends Error {
  /** HTTP status (0: the service could not be reached). */
  readonly status: number;
  readonly code: HttpErrorCode;
  /** The request field at fault, when there is one. */
  readonly field: string | undefined;
  readonly headers: Record<string, string>;

  constructor(status: number, message: string, options: HttpErrorOptions = {}) {
    super(message, options.cause === undefined ? undefined : { cause: options.cause });
    this.name = "HttpError";
    this.status = status;
    this.code = options.code ?? codeOfStatus(status);
    this.field = options.field;
    this.headers = options.headers ?? {};
  }

  /** The `{error: {code, message, field?}}` body reins services answer with. */
  toBody(): { error: { code: string; message: string; field?: string } } {
    return {
      error: {
        code: this.code,
        message: this.message,
        ...(this.field === undefined ? {} : { field: this.field }),
      },
    };
  }

  /** The JSON response of this error. */
  toResponse(): Response {
    return Response.json(this.toBody(), {
      status: this.status < 200 || this.status > 599 ? 500 : this.status,
      headers: this.headers,
    });
  }
}

/**
 * The HTTP status of any thrown value: an {@link HttpError}'s own, else null.
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * import { HttpError, statusOf } from "./error.ts";
 * assert.equal(statusOf(new HttpError(404, "rollout_id: no rollout 'r'")), 404);
 * assert.equal(statusOf(new Error("boom")), null);
 * ```
 */
export function statusOf(error: unknown): number | null {
  return error instanceof HttpError ? error.status : null;
}

/**
 * True for the errors an aborted fetch, stream or timer rejects with.
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * import { isAbortError } from "./error.ts";
 * assert.equal(isAbortError(new DOMException("gone", "AbortError")), true);
 * assert.equal(isAbortError(new Error("boom")), false);
 * ```
 */
export function isAbortError(error: unknown): boolean {
  const name = (error as { name?: unknown } | null)?.name;
  return name === "AbortError" || name === "TimeoutError";
}

/**
 * Reads an error answer of a reins service (`{error: {code, message, field?}}`) into an
 * {@link HttpError}; any other body becomes a message quoting its start.
 */
export async function httpErrorFrom(response: Response, what: string): Promise<HttpError> {
  const text = await response.text().catch(() => "");
  try {
    const parsed = JSON.parse(text) as {
      error?: { code?: unknown; message?: unknown; field?: unknown };
    };
    const error = parsed?.error;
    if (error && typeof error.message === "string") {
      return new HttpError(response.status, error.message, {
        ...(typeof error.code === "string" ? { code: error.code } : {}),
        ...(typeof error.field === "string" ? { field: error.field } : {}),
      });
    }
  } catch {
    // Not a reins error body (a proxy in between); fall through with the raw text.
  }
  return new HttpError(
    response.status,
    `${what} failed with HTTP ${response.status}: ${text.slice(0, 500)}`,
  );
}

/**
 * The {@link HttpError} to answer for anything a handler threw, logged once: a client that went
 * away is a one-line 499, a known error is answered as it is (5xx logged without a stack), and
 * anything else is a logged 500 whose message hides the details.
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * import { HttpError, toHttpError } from "./error.ts";
 * const request = new Request("http://x/v1/rollouts");
 * assert.equal(toHttpError("gateway", new HttpError(404, "rollout_id: no rollout 'r'"), request).status, 404);
 * ```
 */
export function toHttpError(service: string, error: unknown, request: Request): HttpError {
  const where = `${request.method} ${new URL(request.url).pathname}`;
  if (error instanceof HttpError) {
    if (error.status === 499) {
      console.warn(`${service}: 499 ${where}: ${error.message}`);
    } else if (error.status >= 500) {
      console.error(`${service}: ${error.status} ${where}: ${error.message}`);
    }
    return error;
  }
  if (isAbortError(error) || request.signal.aborted) {
    console.warn(`${service}: 499 ${where}: the client closed the request`);
    return new HttpError(499, "client closed the request");
  }
  console.error(
    `${service}: internal error in ${where}:`,
    error instanceof Error ? error.stack : error,
  );
  return new HttpError(500, `internal error (see the ${service} log)`, { code: "internal" });
}
