/**
 * The data model: zod schemas and inferred types of the contracts between areas (rollouts,
 * events, samples, the gateway's API, the proxy's upstreams, the trainer worker's requests, the
 * UI's step metrics, curated tasks). Each contract lives in `lib/schema/<topic>.ts`; this file is
 * their single import point. A schema only one area reads (its own config) lives next to that
 * area instead, in `lib/<area>/schema.ts` (see `docs/architecture.md`, "Where is…").
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * import { parseOrThrow, RolloutCreateSchema } from "./schema.ts";
 * const create = parseOrThrow(RolloutCreateSchema, { input: { question: "2+2" } });
 * assert.equal(create.mode, "train");
 * ```
 *
 * @module
 */
export * from "./schema/core.ts";
export * from "./schema/gateway.ts";
export * from "./schema/gateway_api.ts";
export * from "./schema/proxy.ts";
export * from "./schema/trainer.ts";
export * from "./schema/ui.ts";
export * from "./schema/curation.ts";
