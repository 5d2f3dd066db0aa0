/**
 * What every UI sub-app shares (the store, the run index, the mount path, the options, the
 * run's tokenizer) and the validator middleware that parses a route's query string with its
 * zod schema: a bad value is a 400 naming the field before the handler runs.
 *
 * @module
 */
import type { z } from "zod";
import { validator } from "hono/validator";
import type { Store } from "../../gateway/store.ts";
import type { Auditor } from "../../monitors/auditor.ts";
import type { Monitor } from "../../monitors/types.ts";
import { parseOrThrow, type PhaseSnapshot } from "../../schema.ts";
import type { ChatTokenizer } from "../../tokens/types.ts";
import type { PageContext } from "../layout.ts";
import type { RolloutText } from "../query.ts";
import type { RunIndex } from "../run_index.ts";
import type { RunTokenizer } from "../run_tokenizer.ts";
import type { RunInfo } from "../runs.ts";

/** Options of `createUi` / `createUiApp`. */
export interface UiOptions {
  /** Path the UI is mounted at (default `/ui`). */
  base?: string;
  /**
   * Decodes token ids on the detail page. `"auto"` (the command line's default) reads it from
   * the run (see `detectRunTokenizer`); a function loads it when a page first needs it (once;
   * again after a failure); without one, ids are shown.
   */
  tokenizer?: ChatTokenizer | "auto" | (() => Promise<ChatTokenizer>);
  /** The run's directory (config, `tokenizer.json`): read for the tokenizer and advantages. */
  runDir?: string;
  /** A metrics JSONL file of `TrainStepMetrics` lines, re-read on each overview render. */
  metricsPath?: string;
  /**
   * A directory of runs (each subdirectory, up to two levels down, holding a `metrics.jsonl`,
   * e.g. `runs/` or `experiments/results/`), listed on the runs page with this gateway's runs.
   */
  runsDir?: string;
  /** Monitors run on each finished rollout (default: the built-in ones; `false`: none). */
  monitors?: readonly Monitor[] | false;
  /** Reviews flagged rollouts (see `createLlmAuditor`). */
  auditor?: Auditor;
  /** How often the UI's index follows the change feed (default 500 ms). */
  indexPollMs?: number;
  /** How often `/api/stream` polls the store when idle (default 250 ms). */
  streamPollMs?: number;
  /** How long a login session lasts (default 12 h; logout ends it at once). */
  sessionTtlMs?: number;
}

/** The shared state the sub-apps read. */
export interface UiDeps {
  store: Store;
  base: string;
  index: RunIndex;
  options: UiOptions;
  texts: RolloutText;
  /** Aborted when the UI closes. */
  closing: AbortSignal;
  phaseSnapshot(): PhaseSnapshot | null;
  pageContext(): Promise<PageContext>;
  /** The tokenizer (resolved once when `"auto"`). */
  tokenizer(): Promise<RunTokenizer>;
  /** Every run the UI knows: the runs directory's and this gateway's. */
  runs(): Promise<RunInfo[]>;
}

/** Query values as Hono hands them to a validator (repeated keys as arrays). */
export type QueryInput = Record<string, string | string[]>;

/**
 * Validator middleware for a route's query string: `c.req.valid("query")` is then the parsed,
 * typed value; a value the schema refuses answers 400 with the field named.
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * import { Hono } from "hono";
 * import { z } from "zod";
 * import { HttpError } from "../../util/error.ts";
 * import { validQuery } from "./deps.ts";
 * const app = new Hono()
 *   .get("/", validQuery(z.object({ n: z.coerce.number().int() })), (c) => c.json(c.req.valid("query")))
 *   .onError((err, c) => c.json({ error: err.message }, (err as HttpError).status as 400));
 * assert.deepEqual(await (await app.request("/?n=3")).json(), { n: 3 });
 * const bad = await app.request("/?n=x");
 * assert.equal(bad.status, 400);
 * assert.match((await bad.json()).error, /^n: /);
 * ```
 */
export function validQuery<S extends z.ZodType>(schema: S) {
  return validator("query", (value: QueryInput) => parseOrThrow(schema, value) as z.output<S>);
}

/** A file name safe in a `content-disposition` header. */
export function safeFileName(id: string): string {
  return id.replace(/[^A-Za-z0-9._-]/g, "_");
}

/** Validator middleware for a route's path parameters (see {@link validQuery}). */
export function validParam<S extends z.ZodType>(schema: S) {
  return validator(
    "param",
    (value: Record<string, string>) => parseOrThrow(schema, value) as z.output<S>,
  );
}
