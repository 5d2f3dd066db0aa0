/**
 * Drill-down from a training step to its tokens: the step's metrics, its training rollouts
 * grouped by task input (group view: answer, reward, advantage and loss weight side by side),
 * each rollout's samples with their advantage and loss weight, and links to the rollout, its
 * token view and a diff of any two.
 *
 * Advantages and loss weights are recomputed here, by `computeAdvantages` and
 * `computeLossWeights` of lib/algo, from the stored rewards and the run's `advantage` and
 * `normalization` settings (its `config.json`; the loop's defaults without one), over the
 * rollouts shown (a step page: the whole step, as the loop does). The loop's filters (stale
 * samples, zero-variance groups) are not replayed, so a dropped group shows advantage 0 here.
 *
 * @module
 */
import { computeAdvantages, computeLossWeights } from "../algo/mod.ts";
import type { Store } from "../gateway/store.ts";
import { parseOutput } from "../tokens/parse_output.ts";
import type { Rollout, RolloutEvent, Sample } from "../schema.ts";
import type { TrainStepMetrics } from "../schema/ui.ts";
import type { ChatTokenizer } from "../tokens/types.ts";
import { assembleForView } from "./detail.ts";
import { html, type SafeHtml, tableHead } from "./html.ts";
import { badge } from "./layout.ts";
import { displayStep, flattenStep, fmtMetric, fmtSig } from "./metrics.ts";

/** Most rollouts a drill-down page reads. */
export const MAX_DRILL_ROLLOUTS = 256;

/** One sample of a rollout with the advantage and loss weight it trains with. */
export interface SampleFacts {
  index: number;
  tokens: number;
  trained: number;
  /** Mean advantage over its trained tokens. */
  advantage: number;
  /** Σ loss weight over its trained tokens (its share of the batch's gradient). */
  weight: number;
  split: string | null;
}

/** One rollout of a group view. */
export interface RolloutFacts {
  rollout: Rollout;
  answer: string;
  samples: SampleFacts[];
  advantage: number | null;
  weight: number;
  /** Why samples are missing (assembly failed, no call). */
  problem: string | null;
}

/** A group: its task input and its rollouts. */
export interface GroupFacts {
  group_id: string;
  input: unknown;
  rollouts: RolloutFacts[];
}

/** The run's advantage and normalization settings (from its config, else the defaults). */
export interface AlgoSettings {
  advantage: Record<string, unknown>;
  normalization: Record<string, unknown>;
}

/** Reads `advantage` and `normalization` from a run config (the loop's defaults otherwise). */
export function algoSettings(config: Record<string, unknown> | null): AlgoSettings {
  const obj = (v: unknown) =>
    v && typeof v === "object" && !Array.isArray(v) ? v as Record<string, unknown> : null;
  return {
    advantage: obj(config?.advantage) ?? { level: "rollout" },
    normalization: obj(config?.normalization) ?? { mode: "rollout_token_mean" },
  };
}

/** The text of a rollout's final answer (its last call's content, else reasoning or calls). */
export function answerOf(events: readonly RolloutEvent[], tokenizer?: ChatTokenizer): string {
  const calls = events.filter((e) => e.type === "model_request");
  const last = calls.at(-1);
  if (!last || last.type !== "model_request") return "";
  const p = last.payload;
  const text = p.response_text ??
    (tokenizer && p.response_token_ids.length ? tokenizer.decode(p.response_token_ids) : null);
  if (text === null) return `(${p.response_token_ids.length} tokens, no tokenizer)`;
  const out = parseOutput(text, { newToolCallId: () => "" });
  const calls_ = out.tool_calls.map((c) => `${c.name}(${c.arguments})`).join(" ");
  return (out.content || calls_ || out.reasoning || "").trim();
}

/**
 * Reads rollouts with their events, assembles their samples and computes the advantage and
 * loss weight of each over all of them (one batch, as a step trains).
 */
export async function groupFacts(
  store: Store,
  rollouts: readonly Rollout[],
  settings: AlgoSettings,
  tokenizer?: ChatTokenizer,
): Promise<GroupFacts[]> {
  const read = await Promise.all(rollouts.map(async (rollout) => {
    const events = await store.listEvents(rollout.rollout_id);
    const assembled = assembleForView(events, rollout.rollout_id, "prefix_merge", tokenizer);
    return { rollout, events, assembled };
  }));
  const batch: Sample[] = [];
  const owner: number[] = [];
  read.forEach((r, i) => {
    if (typeof r.assembled === "string") return;
    for (const s of r.assembled.samples) {
      batch.push({
        ...s,
        reward: r.rollout.reward ?? 0,
        group_id: r.rollout.group_id ?? r.rollout.rollout_id,
      });
      owner.push(i);
    }
  });
  let weighted: Sample[] = batch;
  let problem: string | null = null;
  try {
    const adv = computeAdvantages(batch, settings.advantage);
    weighted = computeLossWeights(adv.samples, settings.normalization).samples;
  } catch (err) {
    problem = `advantages: ${err instanceof Error ? err.message : err}`;
  }
  const facts: RolloutFacts[] = read.map((r) => ({
    rollout: r.rollout,
    answer: answerOf(r.events, tokenizer),
    samples: [],
    advantage: null,
    weight: 0,
    problem: typeof r.assembled === "string" ? r.assembled : problem,
  }));
  const counts = new Map<number, number>();
  weighted.forEach((s, k) => {
    const f = facts[owner[k]];
    const index = counts.get(owner[k]) ?? 0;
    counts.set(owner[k], index + 1);
    let trained = 0;
    let advSum = 0;
    let weight = 0;
    for (let t = 0; t < s.tokens.length; t++) {
      if (!s.loss_mask[t]) continue;
      trained++;
      advSum += s.advantage?.[t] ?? 0;
      weight += s.loss_weight?.[t] ?? 0;
    }
    f.samples.push({
      index,
      tokens: s.tokens.length,
      trained,
      advantage: trained ? advSum / trained : 0,
      weight,
      split: s.provenance.split_reason,
    });
  });
  for (const f of facts) {
    const trained = f.samples.reduce((a, s) => a + s.trained, 0);
    f.weight = f.samples.reduce((a, s) => a + s.weight, 0);
    f.advantage = trained
      ? f.samples.reduce((a, s) => a + s.advantage * s.trained, 0) / trained
      : null;
  }
  const groups = new Map<string, GroupFacts>();
  for (const f of facts) {
    const id = f.rollout.group_id ?? f.rollout.rollout_id;
    if (!groups.has(id)) groups.set(id, { group_id: id, input: f.rollout.input, rollouts: [] });
    groups.get(id)!.rollouts.push(f);
  }
  return [...groups.values()];
}

function short(text: string, max = 160): string {
  const one = text.replace(/\s+/g, " ");
  return one.length > max ? `${one.slice(0, max - 1)}…` : one;
}

/** The group view: one table per group, rollouts side by side with a diff picker. */
export function groupsView(base: string, groups: readonly GroupFacts[]): SafeHtml {
  if (!groups.length) return html`<p class="muted" id="no-rollouts">No rollouts.</p>`;
  return html`<form method="get" action="${base}/diff" id="diff-picker">
<p class="muted">Tick two rollouts and <button type="submit" id="diff-selected">diff them</button>.
Advantage and loss weight: recomputed from the rewards with the run's settings.</p>
${
    groups.map((g) =>
      html`
        <section class="group" data-group="${g.group_id}">
          <h3><a href="${base}/groups/${encodeURIComponent(g.group_id)}">group ${g.group_id}</a>
        <span class="muted">${g.rollouts.length} rollout(s) · input ${short(
          JSON.stringify(g.input),
          120,
        )}</span></h3>
          <div class="scroll-x">
            <table class="group-table">
              ${tableHead([
                "",
                "rollout",
                "status",
                "answer",
                { num: "reward" },
                { num: "advantage" },
                { num: "loss weight" },
                "samples (advantage · weight)",
              ])}
              <tbody>${g.rollouts.map((f) =>
                html`
                  <tr data-rollout="${f.rollout.rollout_id}">
                    <td><input type="checkbox" name="r" value="${f.rollout.rollout_id}"></td>
                    <td><a href="${base}/rollouts/${encodeURIComponent(f.rollout.rollout_id)}">${f
                      .rollout.rollout_id}</a></td>
                    <td>${badge(f.rollout.status)}</td>
                    <td class="answer" title="${f.answer}">${short(f.answer)}</td>
                    <td class="num reward">${fmtSig(f.rollout.reward)}</td>
                    <td class="num advantage">${fmtSig(f.advantage)}</td>
                    <td class="num weight">${fmtSig(f.weight)}</td>
                    <td class="samples">${f.problem && !f.samples.length
                      ? html`<span class="muted">${short(f.problem, 80)}</span>`
                      : f.samples.map((s) =>
                        html`
                          <span class="sample-fact" data-sample="${s.index}"
                            title="${s.trained} of ${s.tokens} tokens trained${s.split
                              ? `; split: ${s.split}`
                              : ""}">#${s.index} ${fmtSig(s.advantage, 3)} · ${fmtSig(
                                s.weight,
                                3,
                              )}</span>
                        `
                      )}</td>
                  </tr>
                `
              )}</tbody>
            </table>
          </div>
        </section>
      `
    )
  }</form>`;
}

/** A step's metrics as `name value` cells (every logged value, units shown). */
export function stepMetricsView(step: TrainStepMetrics | undefined): SafeHtml {
  if (!step) return html`<p class="muted">No metrics logged for this step.</p>`;
  const flat = flattenStep(step);
  return html`<div class="metric-grid" id="step-metrics">${
    Object.keys(flat).sort().map((k) =>
      html`<div><span class="muted">${k}</span> <b>${fmtMetric(k, flat[k])}</b></div>`
    )
  }</div>`;
}

/** The step page body. */
export function stepView(
  base: string,
  shownStep: number,
  metrics: TrainStepMetrics | undefined,
  groups: readonly GroupFacts[],
  truncated: boolean,
): SafeHtml {
  const count = groups.reduce((a, g) => a + g.rollouts.length, 0);
  const prev = shownStep > 1
    ? html`<a href="${base}/steps/${shownStep - 1}" id="prev-step">← step ${shownStep - 1}</a>`
    : "";
  return html`<p>${prev} <a href="${base}/steps/${shownStep + 1}" id="next-step">step ${
    shownStep + 1
  } →</a> · <a href="${base}/rollouts?step=${shownStep - 1}&role=train">as a list</a></p>
<h2>Metrics</h2>${stepMetricsView(metrics)}
<h2>Rollouts <span class="muted" id="step-rollouts">${count} in ${groups.length} group(s)${
    truncated ? `, the first ${MAX_DRILL_ROLLOUTS}` : ""
  }</span></h2>
${groupsView(base, groups)}`;
}

/** The label value of a shown step (the loop labels rollouts with the 0-based step). */
export function stepLabel(shownStep: number): string {
  return String(shownStep - 1);
}

export { displayStep };
