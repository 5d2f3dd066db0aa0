/**
 * `deno bench` for sample assembly (small sizes; `benches/assembly.ts` runs the full workload):
 * 16 rollouts × 20 calls with prompts growing to 4k tokens, one bench per strategy.
 */
import { assembleRollout } from "../lib/samples/mod.ts";
import type { MergeStrategy } from "../lib/schema.ts";
import { makeWorkload } from "./assembly_workload.ts";

const work = makeWorkload({
  rollouts: 16,
  calls: 20,
  finalTokens: 4096,
  responseTokens: 64,
  firstPromptTokens: 256,
});

// buffer_substitute compares decoded texts; one code point per id (injective) serves the bench.
const decode = (ids: Uint32Array) => {
  let text = "";
  for (const id of ids) text += String.fromCodePoint(id);
  return text;
};

for (
  const strategy of ["prefix_merge", "per_call", "tree", "buffer_substitute"] as MergeStrategy[]
) {
  Deno.bench({
    name: `assemble ${strategy} (16 rollouts × 20 calls → 4k tokens, ${
      (work.tokens / 1e6).toFixed(2)
    } Mtok)`,
    group: "assembly",
    baseline: strategy === "prefix_merge",
    fn() {
      for (const events of work.rollouts) assembleRollout(events, { strategy, decode });
    },
  });
}
