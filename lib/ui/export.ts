/**
 * Rollout export: everything about one rollout (the rollout, every event with token arrays,
 * the assembled samples, break diagnoses, dropped calls, metrics, monitor flags) as one JSON
 * document, and a Deno notebook that loads it.
 *
 * @module
 */
import type { Store } from "../gateway/store.ts";
import { StoreError } from "../gateway/store.ts";
import { eventToWire } from "../gateway/wire.ts";
import type { JsonObject, MergeStrategy, Sample } from "../schema.ts";
import { ROLLOUT_EXPORT_FORMAT, type RolloutExport } from "../schema/ui.ts";
import type { ChatTokenizer } from "../tokens/types.ts";
import { floatArray, intArray } from "../util/arrays.ts";
import { assembleForView, flagsOf } from "./detail.ts";

function sampleToJson(s: Sample): JsonObject {
  return {
    rollout_id: s.rollout_id,
    group_id: s.group_id,
    tokens: intArray(s.tokens),
    loss_mask: intArray(s.loss_mask),
    rollout_logprobs: floatArray(s.rollout_logprobs),
    ...(s.parent ? { parent: intArray(s.parent) } : {}),
    reward: s.reward,
    policy_version: s.policy_version,
    provenance: {
      ...s.provenance,
      request_seqs: [...s.provenance.request_seqs],
      response_starts: [...s.provenance.response_starts],
    },
  };
}

function toJson(value: unknown): JsonObject {
  return JSON.parse(JSON.stringify(value)) as JsonObject;
}

/**
 * Builds the export document of one rollout (404 `StoreError` when it does not exist).
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * import { openSqliteStore } from "../gateway/sqlite_store.ts";
 * import { exportRollout } from "./export.ts";
 * const store = openSqliteStore(":memory:");
 * await store.createRollouts([{ rollout_id: "r1", input: { q: 1 } }]);
 * const doc = await exportRollout(store, "r1");
 * assert.equal(doc.format, "reins.rollout.v1");
 * await store.close();
 * ```
 */
export async function exportRollout(
  store: Store,
  rolloutId: string,
  options: { strategy?: MergeStrategy; tokenizer?: ChatTokenizer } = {},
): Promise<RolloutExport> {
  const rollout = await store.getRollout(rolloutId);
  if (!rollout) throw new StoreError("not_found", `rollout_id: no rollout '${rolloutId}'`);
  const events = await store.listEvents(rolloutId);
  const strategy = options.strategy ?? "prefix_merge";
  const result = assembleForView(events, rolloutId, strategy, options.tokenizer);
  const assembled = typeof result === "string" ? null : result;
  return {
    format: ROLLOUT_EXPORT_FORMAT,
    exported_at: Date.now(),
    rollout: toJson(rollout),
    events: events.map((e) => toJson(eventToWire(e))),
    samples: assembled ? assembled.samples.map(sampleToJson) : [],
    strategy,
    breaks: assembled ? assembled.breaks.map(toJson) : [],
    dropped: assembled ? assembled.dropped.map(toJson) : [],
    metrics: assembled ? toJson(assembled.metrics) : { error: result as string },
    flags: flagsOf(events),
  };
}

/**
 * A Deno Jupyter notebook that fetches the export from the gateway (URL and admin key from
 * `REINS_GATEWAY_URL` / `REINS_ADMIN_KEY`) or reads a saved export file, and re-assembles it
 * with reins. It runs wherever it is saved: reins' modules resolve their packages through reins'
 * own `deno.json`, which a notebook outside the checkout does not have, so the notebook runs
 * them in `deno eval --config <reins>/deno.json` (the checkout from `REINS_HOME`, else where it
 * was exported from).
 */
export function rolloutNotebook(origin: string, base: string, rolloutId: string): JsonObject {
  const home = decodeURIComponent(new URL("../../", import.meta.url).pathname).replace(/\/$/, "");
  const code = (lines: string[]) => ({
    cell_type: "code",
    execution_count: null,
    metadata: {},
    outputs: [],
    source: lines.map((l, i) => (i < lines.length - 1 ? l + "\n" : l)),
  });
  const path = `${base}/rollouts/${encodeURIComponent(rolloutId)}/export.json`;
  return {
    cells: [
      {
        cell_type: "markdown",
        metadata: {},
        source: [
          `# Rollout ${rolloutId}\n`,
          "Exported from the reins Live UI; runs on the Deno kernel wherever it is saved. ",
          "Set `REINS_ROLLOUT_EXPORT` to a saved export file, or `REINS_GATEWAY_URL` and ",
          "`REINS_ADMIN_KEY` to fetch it; `REINS_HOME` to use another reins checkout.",
        ],
      },
      code([
        `const gateway = Deno.env.get("REINS_GATEWAY_URL") ?? ${JSON.stringify(origin)};`,
        `const file = Deno.env.get("REINS_ROLLOUT_EXPORT");`,
        `const doc = file ? JSON.parse(await Deno.readTextFile(file)) : await (await fetch(`,
        `  gateway + ${JSON.stringify(path)},`,
        `  { headers: { authorization: "Bearer " + Deno.env.get("REINS_ADMIN_KEY") } },`,
        `)).json();`,
        `({ rollout: doc.rollout.rollout_id, status: doc.rollout.status, reward: doc.rollout.reward,`,
        `  events: doc.events.length, samples: doc.samples.length, flags: doc.flags.length });`,
      ]),
      code([
        `// reins' modules resolve through reins' deno.json: run them under it (see the header).`,
        `const REINS = Deno.env.get("REINS_HOME") ?? ${JSON.stringify(home)};`,
        `async function withReins(script: string, input: unknown): Promise<unknown> {`,
        `  const child = new Deno.Command(Deno.execPath(), {`,
        `    args: ["eval", "--quiet", "--config", REINS + "/deno.json", script],`,
        `    stdin: "piped", stdout: "piped", stderr: "inherit",`,
        `  }).spawn();`,
        `  const writer = child.stdin.getWriter();`,
        `  await writer.write(new TextEncoder().encode(JSON.stringify(input)));`,
        `  await writer.close();`,
        `  const out = await child.output();`,
        `  if (!out.success) throw new Error("reins script failed (see stderr)");`,
        `  return JSON.parse(new TextDecoder().decode(out.stdout));`,
        `}`,
        `const metrics = await withReins(\``,
        `  import { assembleRollout } from "\${REINS}/lib/samples/mod.ts";`,
        `  import { eventFromWire } from "\${REINS}/lib/gateway/wire.ts";`,
        `  const doc = JSON.parse(await new Response(Deno.stdin.readable).text());`,
        `  const result = assembleRollout(doc.events.map(eventFromWire), { strategy: "tree" });`,
        `  console.log(JSON.stringify(result.metrics));`,
        `\`, doc);`,
        `metrics;`,
      ]),
    ],
    metadata: {
      kernelspec: { display_name: "Deno", language: "typescript", name: "deno" },
      language_info: { name: "typescript" },
    },
    nbformat: 4,
    nbformat_minor: 5,
  };
}
