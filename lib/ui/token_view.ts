/**
 * A sample's tokens as running text: each token is an inline span (trained tokens underlined
 * and shaded by 1 − p, context tokens grey), a marker where each model call's response starts,
 * long context runs folded. The spans are joined with nothing between them: whitespace
 * between inline elements inside `white-space: pre-wrap` would show as line breaks, so the
 * markup is built as strings here (never with a formatted template).
 *
 * @module
 */
import type { Sample } from "../schema.ts";
import { decodeWithOffsets } from "../tokens/sequence.ts";
import type { ChatTokenizer } from "../tokens/types.ts";
import { escapeHtml, type SafeHtml, unsafeRaw } from "./html.ts";

/** Tokens drawn per sample before the view is cut (the export has them all). */
export const MAX_TOKENS_SHOWN = 20_000;
/** Context runs longer than this are folded (head and tail stay visible). */
const FOLD_CONTEXT = 400;
const FOLD_KEEP = 80;

/**
 * Renders one sample's tokens: trained vs context, logprob shading, response starts.
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * import { tokenView } from "./token_view.ts";
 * const sample = {
 *   tokens: new Int32Array([5, 6, 7]),
 *   loss_mask: new Uint8Array([0, 1, 1]),
 *   rollout_logprobs: new Float32Array([0, -0.1, -2]),
 *   provenance: { response_starts: [1], request_seqs: [4] },
 * } as unknown as Parameters<typeof tokenView>[0];
 * const markup = tokenView(sample).toString();
 * assert.match(markup, /<\/span><span class="seg"/); // nothing between spans
 * assert.equal((markup.match(/class="tk trn"/g) ?? []).length, 2);
 * ```
 */
export function tokenView(sample: Sample, tokenizer?: ChatTokenizer): SafeHtml {
  const n = Math.min(sample.tokens.length, MAX_TOKENS_SHOWN);
  const ids = sample.tokens.subarray(0, n);
  let pieces: string[];
  if (tokenizer) {
    const { text, spans } = decodeWithOffsets(tokenizer, ids);
    pieces = spans.map(([a, b]) => text.slice(a, b));
  } else {
    pieces = Array.from(ids, (id) => `${id} `);
  }
  const starts = new Map<number, number>();
  sample.provenance.response_starts.forEach((start, k) =>
    starts.set(start, sample.provenance.request_seqs[k])
  );
  const ctx = (a: number, b: number) =>
    `<span class="tk ctx" title="context #${a}–${b - 1}">${
      escapeHtml(pieces.slice(a, b).join(""))
    }</span>`;
  const out: string[] = [];
  let i = 0;
  while (i < n) {
    const seq = starts.get(i);
    if (seq !== undefined) {
      out.push(`<span class="seg" title="response of call seq ${seq}">seq ${seq}</span>`);
    }
    if (sample.loss_mask[i] === 1) {
      const lp = sample.rollout_logprobs[i];
      const u = Math.min(1, Math.max(0, 1 - Math.exp(lp)));
      out.push(
        `<span class="tk trn" style="--u:${u.toFixed(2)}" title="#${i} id ${sample.tokens[i]} ` +
          `logprob ${lp.toFixed(3)}">${escapeHtml(pieces[i])}</span>`,
      );
      i++;
      continue;
    }
    let j = i;
    while (j < n && sample.loss_mask[j] === 0 && (j === i || !starts.has(j))) j++;
    const run = j - i;
    if (run > FOLD_CONTEXT) {
      out.push(
        ctx(i, i + FOLD_KEEP),
        `<details class="fold"><summary>… ${run - 2 * FOLD_KEEP} context tokens …</summary>` +
          `${ctx(i + FOLD_KEEP, j - FOLD_KEEP)}</details>`,
        ctx(j - FOLD_KEEP, j),
      );
    } else {
      out.push(ctx(i, j));
    }
    i = j;
  }
  const cut = sample.tokens.length > n
    ? `<p class="muted">Showing ${n} of ${sample.tokens.length} tokens (the export has all).</p>`
    : "";
  return unsafeRaw(`<div class="tokens">${out.join("")}</div>${cut}`);
}
