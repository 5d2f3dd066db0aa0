/**
 * Terminal progress of a long run: one status line per step (and a live line while rollouts
 * run when the output is a terminal).
 *
 * @module
 */
import type { LoopStepMetrics } from "../schema/loop.ts";

/** Receives what the loop is doing; the loop calls it, it never throws. */
export interface ProgressSink {
  /** A free-form status (waiting for rollouts, training, …). */
  status(text: string): void;
  /** One finished step. */
  step(metrics: LoopStepMetrics, totalSteps: number): void;
  /** A line to keep (phase changes, resume, SFT). */
  log(text: string): void;
}

const fmt = (x: number | null, digits = 3) => (x === null ? "-" : x.toFixed(digits));

/**
 * One line summarising a step.
 *
 * @example
 * ```ts
 * import { stepLine } from "./progress.ts";
 * const metrics = {
 *   step: 2, policy_version: 7, time: 0, mode: "collocated_async" as const, rollouts: 16,
 *   reward_mean: 0.4375, reward_std: 0.5, pass_rate: 0.44, samples: 16, samples_per_rollout: 1,
 *   trained_rollouts: 16, trained_samples: 16, trained_tokens: 2048, advantage_mean: 0,
 *   advantage_std: 1, advantage_abs_max: 1.3, break_reasons: {}, tis_samples: 0,
 *   filtered: { error: 0, zero_variance: 2, no_samples: 0, stale: 0 },
 *   staleness_max: 1, staleness_mean: 0.5, alignment_corr: 1, alignment_logprob_corr: 1,
 *   alignment_tokens: 2048, alignment_max_abs_dp: 0, loss: 0.01, entropy: 0.9,
 *   clip_fraction: 0.01, grad_norm: 0.8, held_calls: 0, in_flight_at_update: 0,
 *   timings_ms: { step: 4200 },
 * };
 * stepLine(metrics, 20);
 * // "step  3/20 v7 reward 0.438 pass 0.44 spr 1.00 tok 2048 align 1.0000 ent 0.90 clip 0.010
 * //  gn 0.80 held 0 stale<=1 drop zero_variance=2 4.2s"
 * ```
 */
export function stepLine(m: LoopStepMetrics, totalSteps: number): string {
  const width = String(totalSteps).length;
  const filtered = Object.entries(m.filtered).filter(([, n]) => n > 0).map(([k, n]) => `${k}=${n}`)
    .join(",");
  return `step ${String(m.step + 1).padStart(width)}/${totalSteps} v${m.policy_version} ` +
    `reward ${fmt(m.reward_mean)} pass ${fmt(m.pass_rate, 2)} spr ${
      fmt(m.samples_per_rollout, 2)
    } ` +
    `tok ${m.trained_tokens} align ${fmt(m.alignment_corr, 4)} ent ${fmt(m.entropy, 2)} ` +
    `clip ${fmt(m.clip_fraction, 3)} gn ${fmt(m.grad_norm, 2)} held ${m.held_calls} ` +
    `stale<=${m.staleness_max}${filtered ? ` drop ${filtered}` : ""} ` +
    `${((m.timings_ms.step ?? 0) / 1000).toFixed(1)}s`;
}

/**
 * The default sink: step lines on stdout; status lines overwrite one another on a terminal
 * and are skipped otherwise (CI logs stay readable).
 *
 * @example
 * ```ts
 * import { terminalProgress } from "./progress.ts";
 * const progress = terminalProgress();
 * progress.log("SFT warm start: 120 steps");
 * ```
 */
export function terminalProgress(options: { quiet?: boolean } = {}): ProgressSink {
  const tty = Deno.stdout.isTerminal();
  const encoder = new TextEncoder();
  let live = false;
  const clear = () => {
    if (live) Deno.stdout.writeSync(encoder.encode("\r\x1b[2K"));
    live = false;
  };
  return {
    status(text) {
      if (options.quiet || !tty) return;
      clear();
      Deno.stdout.writeSync(encoder.encode(text.slice(0, 120)));
      live = true;
    },
    step(metrics, total) {
      if (options.quiet) return;
      clear();
      console.log(stepLine(metrics, total));
    },
    log(text) {
      if (options.quiet) return;
      clear();
      console.log(text);
    },
  };
}

/** A sink that records everything (tests) or drops it. */
export function silentProgress(): ProgressSink & { lines: string[] } {
  const lines: string[] = [];
  return {
    lines,
    status() {},
    step(metrics, total) {
      lines.push(stepLine(metrics, total));
    },
    log(text) {
      lines.push(text);
    },
  };
}
