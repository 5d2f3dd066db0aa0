/**
 * Assembly throughput and memory: 512 rollouts × 20 calls with prompts growing to 16k tokens,
 * merged with `prefix_merge` on one core. Prints the figures, and ends with
 * `assembly_mtok_per_s: <number>` (million prompt+response tokens processed per second).
 *
 * Run: `deno task bench:assembly` (or `deno run -A benches/assembly.ts [rollouts]`).
 */
import { parseArgs } from "node:util";
import { assembleRollout, type AssemblyResult } from "../lib/samples/mod.ts";
import type { MergeStrategy } from "../lib/schema.ts";
import { FULL_SHAPE, makeWorkload, type Workload } from "./assembly_workload.ts";

const MB = 1024 * 1024;
const fmt = (bytes: number) => `${(bytes / MB).toFixed(1)} MiB`;

const { positionals } = parseArgs({ args: Deno.args, allowPositionals: true, strict: true });
const rollouts = Number(positionals[0] ?? FULL_SHAPE.rollouts);
const shape = { ...FULL_SHAPE, rollouts };

let peakRss = 0;
let peakHeap = 0;
function sampleMemory(): void {
  const m = Deno.memoryUsage();
  peakRss = Math.max(peakRss, m.rss);
  peakHeap = Math.max(peakHeap, m.heapUsed);
}

// buffer_substitute compares decoded texts; one code point per id (injective) serves the bench.
const decode = (ids: Uint32Array) => {
  let text = "";
  for (const id of ids) text += String.fromCodePoint(id);
  return text;
};

function run(work: Workload, strategy: MergeStrategy, count = work.rollouts.length) {
  const results: AssemblyResult[] = new Array(count);
  const t0 = performance.now();
  for (let i = 0; i < count; i++) {
    results[i] = assembleRollout(work.rollouts[i], { strategy, decode });
    if ((i & 31) === 31) sampleMemory();
  }
  const ms = performance.now() - t0;
  sampleMemory();
  return { results, ms };
}

// Warm the JIT on a small workload first.
run(
  makeWorkload({
    ...shape,
    rollouts: 8,
    finalTokens: 4096,
    responseTokens: 64,
    firstPromptTokens: 256,
  }),
  "prefix_merge",
);

const before = Deno.memoryUsage();
const work = makeWorkload(shape);
const afterInput = Deno.memoryUsage();
peakRss = afterInput.rss;
peakHeap = afterInput.heapUsed;

const calls = shape.rollouts * shape.calls;
const naiveBytes = work.tokens * (4 + 1 + 4); // ids + mask + logprobs per token, per call
// Pass 1 measures memory from a clean state: its peak RSS growth over the inputs is what
// assembly itself holds (the outputs, allocated once at their final length).
const first = run(work, "prefix_merge");
const firstPeakRss = peakRss;
const runs = [work.tokens / 1e6 / (first.ms / 1000)];
let kept: AssemblyResult[] = first.results;
for (let rep = 0; rep < 2; rep++) {
  kept = [];
  const { results, ms } = run(work, "prefix_merge");
  kept = results;
  runs.push(work.tokens / 1e6 / (ms / 1000));
}
const outputTokens = kept.reduce((n, r) => n + r.metrics.tokens_total, 0);
const samples = kept.reduce((n, r) => n + r.samples.length, 0);
const outputBytes = outputTokens * (4 + 1 + 4);
const end = Deno.memoryUsage();
runs.sort((a, b) => a - b);
const median = runs[1];

console.log(
  `workload: ${shape.rollouts} rollouts × ${shape.calls} calls, prompts growing to ` +
    `${shape.finalTokens} tokens (responses ${shape.responseTokens})`,
);
console.log(`tokens processed per pass (Σ prompt+response): ${work.tokens}`);
console.log(`samples: ${samples} (${(samples / shape.rollouts).toFixed(2)} per rollout)`);
console.log(`prefix_merge runs (Mtok/s): ${runs.map((r) => r.toFixed(1)).join(", ")}`);
console.log(`input buffers (per-rollout, views): ${fmt(work.inputBytes)}`);
console.log(`output samples (final contexts): ${fmt(outputBytes)}`);
console.log(`naive per-call copies would need: ${fmt(naiveBytes)}`);
const growth = firstPeakRss - afterInput.rss;
console.log(
  `rss: start ${fmt(before.rss)}, after input ${fmt(afterInput.rss)}, ` +
    `peak in pass 1 ${fmt(firstPeakRss)}, end ${fmt(end.rss)}`,
);
console.log(
  `heap used: peak ${fmt(peakHeap)}; external (typed arrays) at end ${fmt(end.external)}`,
);
console.log(
  `pass 1 peak rss growth over input: ${fmt(growth)} (${(growth / outputBytes).toFixed(2)}× ` +
    `the final contexts, ${(growth / naiveBytes * 100).toFixed(1)}% of the naive sum)`,
);

// Other strategies on a slice (per_call really copies every prompt: keep it small).
kept = [];
const slice = Math.min(32, shape.rollouts);
const sliceTokens = work.tokens / shape.rollouts * slice;
for (const strategy of ["per_call", "tree", "buffer_substitute"] as MergeStrategy[]) {
  const { ms } = run(work, strategy, slice);
  console.log(
    `${strategy} on ${slice} rollouts: ${(sliceTokens / 1e6 / (ms / 1000)).toFixed(1)} Mtok/s`,
  );
}
console.log(`calls: ${calls}`);
console.log(`assembly_mtok_per_s: ${median.toFixed(1)}`);
