import { loadTrajectories, replayTrajectory, withPlaceholderReasoning } from "./lib/trajectories/mod.ts";
import { loadQwen3Tokenizer } from "./lib/tokens/qwen3.ts";
import { assembleRollout } from "./lib/samples/mod.ts";
import { trainedTokens } from "./lib/algo/validate.ts";
import { baselineShift, splitShare, type BatchRollout } from "./experiments/mechanism_exact.ts";
import { ABLATION_SETTINGS } from "./experiments/grid.ts";
const t0 = performance.now();
const tok = await loadQwen3Tokenizer();
const trajs = await loadTrajectories();
for (const variant of ["logged", "thinking"]) {
  const batch: BatchRollout[] = [];
  for (const t0_ of trajs) {
    const t = variant === "thinking" ? withPlaceholderReasoning(t0_) : t0_;
    const events = replayTrajectory(t, tok);
    const { samples } = assembleRollout(events, { strategy: "prefix_merge", group_id: t.group_id, reward: t.reward ?? 0 });
    batch.push({ rollout_id: t.id, group_id: t.group_id, reward: t.reward ?? 0, lengths: samples.map(trainedTokens) });
  }
  console.log(variant, batch.length, "rollouts", new Set(batch.map(b=>b.group_id)).size, "groups", JSON.stringify(baselineShift(batch)));
  for (const s of ABLATION_SETTINGS) console.log(JSON.stringify(splitShare(batch, s)));
}
console.log(((performance.now()-t0)/1000).toFixed(1), "s");
