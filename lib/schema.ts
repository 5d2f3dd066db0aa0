/**
 * zod schemas and inferred types shared by every reins module.
 *
 * Each area keeps its schemas in `lib/schema/<area>.ts`; this file is the single import point.
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
export * from "./schema/tokens.ts";
export * from "./schema/samples.ts";
export * from "./schema/algo.ts";
export * from "./schema/batching.ts";
export * from "./schema/gateway.ts";
export * from "./schema/gateway_api.ts";
export * from "./schema/proxy.ts";
export * from "./schema/trainer.ts";
export * from "./schema/controller.ts";
export * from "./schema/harness.ts";
export * from "./schema/trajectories.ts";
export * from "./schema/harness_cli.ts";
export * from "./schema/ui.ts";
export * from "./schema/loop.ts";
export * from "./schema/curation.ts";
