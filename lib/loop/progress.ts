/**
 * Progress of a long run: one line per step with the RL phase's ETA, and status lines with
 * each phase's ETA (a live line on a terminal, a line every ~10 s otherwise).
 *
 * @module
 */
import type { LoopStepMetrics } from "./schema.ts";

/** How far a phase with a known amount of work is (SFT steps, eval rollouts). */
export interface ProgressCount {
  /** Names the phase; a new name starts a new ETA. */
  phase: string;
  done: number;
  total: number;
}

/** Receives what the loop is doing; the loop calls it, it never throws. */
export interface ProgressSink {
  /** A free-form status (waiting for rollouts, training, …), with the phase's count if known. */
  status(text: string, count?: ProgressCount): void;
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
 * import assert from "node:assert/strict";
 * import { stepLine } from "./progress.ts";
 * const metrics = {
 *   step: 2, policy_version: 7, time: 0, mode: "collocated_async" as const, rollouts: 16,
 *   reward_mean: 0.4375, reward_std: 0.5, pass_rate: 0.44, samples: 16, samples_per_rollout: 1,
 *   trained_rollouts: 16, trained_samples: 16, trained_tokens: 2048, advantage_mean: 0,
 *   advantage_std: 1, advantage_abs_max: 1.3, break_reasons: {}, tis_samples: 0,
 *   filtered: {
 *     unfinished: 0, no_reward: 0, error: 0, no_samples: 0, singleton: 0, zero_variance: 2,
 *     stale: 0,
 *   },
 *   singleton_groups: 0, staleness_max: 1, staleness_mean: 0.5, alignment_corr: 1,
 *   alignment_logprob_corr: 1, alignment_tokens: 2048, alignment_max_abs_dp: 0,
 *   alignment_mean_abs_dp: 0, alignment_max_abs_dlogprob: 0, alignment_k1_kl: 0,
 *   alignment_k3_kl: 0, alignment_ess: 1, is_masked_tokens: 0, is_masked_share: 0,
 *   is_masked_sequences: 0, is_ess: 1, loss: 0.01, kl_ref_mean: 0,
 *   entropy: 0.9, clip_fraction: 0.01, clip_fraction_last_epoch: 0.01, grad_norm: 0.8,
 *   held_calls: 0, in_flight_at_update: 0, timings_ms: { step: 4200 },
 * };
 * assert.equal(
 *   stepLine(metrics, 20),
 *   "step  3/20 v7 reward 0.438 pass 0.44 spr 1.00 tok 2048 align 1.0000 ent 0.90 clip 0.010 " +
 *     "gn 0.80 held 0 stale<=1 drop zero_variance=2 4.2s",
 * );
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
 * Seconds as `42s`, `3m05s` or `1h02m`.
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * import { formatDuration } from "./progress.ts";
 * assert.equal(formatDuration(42.4), "42s");
 * assert.equal(formatDuration(185), "3m05s");
 * assert.equal(formatDuration(3720), "1h02m");
 * ```
 */
export function formatDuration(seconds: number): string {
  const s = Math.max(0, Math.round(seconds));
  if (s < 60) return `${s}s`;
  if (s < 3600) return `${Math.floor(s / 60)}m${String(s % 60).padStart(2, "0")}s`;
  return `${Math.floor(s / 3600)}h${String(Math.floor((s % 3600) / 60)).padStart(2, "0")}m`;
}

/** Options of {@link terminalProgress}. */
export interface TerminalProgressOptions {
  quiet?: boolean;
  /** Overwrite one live status line (default: whether stdout is a terminal). */
  tty?: boolean;
  /**
   * Without a terminal, a status line is printed when a phase starts and then at most once per
   * this many ms (default 10 000), so a log shows progress and ETA without flooding.
   */
  intervalMs?: number;
  /** Clock in ms (tests). */
  now?: () => number;
  /** Where lines go (default stdout). */
  write?: (text: string) => void;
}

/**
 * The default sink: step lines on stdout with the RL phase's ETA; status lines overwrite one
 * another on a terminal, and without one (CI logs, `| tee`) one is printed when a phase starts
 * and then every ~10 s. A status with a count gets the phase's ETA: elapsed time over the work
 * done since the phase's first status, times the work left.
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * import { terminalProgress } from "./progress.ts";
 * const lines: string[] = [];
 * let t = 0;
 * const progress = terminalProgress({ tty: false, now: () => t, write: (l) => lines.push(l) });
 * progress.status("SFT 1/100", { phase: "SFT", done: 1, total: 100 });
 * t = 11_000;
 * progress.status("SFT 51/100", { phase: "SFT", done: 51, total: 100 });
 * assert.deepEqual(lines, ["SFT 1/100 · 1% · 0s elapsed", "SFT 51/100 · 51% · 11s elapsed · eta 11s"]);
 * ```
 */
export function terminalProgress(options: TerminalProgressOptions = {}): ProgressSink {
  const tty = options.tty ?? Deno.stdout.isTerminal();
  const intervalMs = options.intervalMs ?? 10_000;
  const now = options.now ?? (() => performance.now());
  const encoder = new TextEncoder();
  const write = options.write ?? ((text: string) => console.log(text));
  const phases = new Map<string, { t0: number; done0: number }>();
  const stepMs: number[] = [];
  let rlEta: { at: number; left: number } | null = null;
  let lastPrinted = -Infinity;
  let lastPhase: string | null = null;
  let live = false;
  const clear = () => {
    if (live) Deno.stdout.writeSync(encoder.encode("\r\x1b[2K"));
    live = false;
  };
  const emit = (text: string) => {
    if (tty) clear();
    write(text);
  };
  const suffix = (count: ProgressCount | undefined, t: number): string => {
    if (!count) {
      // Between RL steps: the ETA of the whole RL phase, from the steps' mean duration.
      return rlEta
        ? ` · RL eta ${formatDuration(Math.max(0, rlEta.left - (t - rlEta.at)) / 1000)}`
        : "";
    }
    let phase = phases.get(count.phase);
    if (!phase) phases.set(count.phase, phase = { t0: t, done0: count.done });
    const elapsed = (t - phase.t0) / 1000;
    const pct = count.total > 0 ? Math.floor((100 * count.done) / count.total) : 0;
    let text = ` · ${pct}% · ${formatDuration(elapsed)} elapsed`;
    if (count.done > phase.done0) {
      const perUnit = elapsed / (count.done - phase.done0);
      text += ` · eta ${formatDuration(perUnit * (count.total - count.done))}`;
    }
    return text;
  };
  return {
    status(text, count) {
      if (options.quiet) return;
      const t = now();
      const line = text + suffix(count, t);
      if (tty) {
        clear();
        Deno.stdout.writeSync(encoder.encode(line.slice(0, 160)));
        live = true;
        return;
      }
      const phase = count?.phase ?? null;
      const started = phase !== null && phase !== lastPhase;
      lastPhase = phase;
      if (!started && t - lastPrinted < intervalMs) return;
      lastPrinted = t;
      write(line);
    },
    step(metrics, total) {
      if (options.quiet) return;
      const t = now();
      stepMs.push(metrics.timings_ms.step ?? 0);
      const mean = stepMs.reduce((a, b) => a + b, 0) / stepMs.length;
      const left = total - (metrics.step + 1);
      rlEta = left > 0 ? { at: t, left: mean * left } : null;
      lastPrinted = t;
      lastPhase = null;
      emit(
        stepLine(metrics, total) +
          (left > 0 ? ` · eta ${formatDuration((mean * left) / 1000)}` : ""),
      );
    },
    log(text) {
      if (options.quiet) return;
      lastPhase = null;
      emit(text);
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
