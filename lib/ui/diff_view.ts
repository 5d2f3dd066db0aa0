/**
 * A diff of two rollouts' transcripts (what each agent was told and answered, call by call), by
 * lines with the `diff` package: the place two rollouts of one group part ways, at a glance.
 *
 * @module
 */
import { diffLines } from "diff";
import type { RolloutEvent } from "../schema.ts";
import type { ChatTokenizer } from "../tokens/types.ts";
import { html, type SafeHtml } from "./html.ts";

/**
 * A rollout's transcript as text: the last call's messages (the whole conversation so far),
 * then its response; one `[role]` header per message.
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * import { transcriptOf } from "./diff_view.ts";
 * assert.equal(transcriptOf([]), "(no model call)");
 * ```
 */
export function transcriptOf(events: readonly RolloutEvent[], tokenizer?: ChatTokenizer): string {
  const last = events.filter((e) => e.type === "model_request").at(-1);
  if (!last || last.type !== "model_request") return "(no model call)";
  const p = last.payload;
  const lines: string[] = [];
  for (const m of p.messages ?? []) {
    lines.push(`[${m.role}${m.name ? ` ${m.name}` : ""}]`);
    if (m.reasoning_content) lines.push(`<think>${m.reasoning_content}</think>`);
    if (m.content) lines.push(m.content);
    for (const c of m.tool_calls ?? []) {
      lines.push(`tool call ${c.function.name} ${c.function.arguments}`);
    }
  }
  if (!p.messages?.length && tokenizer) {
    lines.push("[prompt]", tokenizer.decode(p.prompt_token_ids));
  }
  const response = p.response_text ??
    (tokenizer ? tokenizer.decode(p.response_token_ids) : `${p.response_token_ids.length} tokens`);
  lines.push("[assistant: response]", response);
  return lines.join("\n");
}

/** Counts of a diff: lines only in a, only in b, in both. */
export interface DiffCounts {
  removed: number;
  added: number;
  same: number;
}

/**
 * The line diff of two texts, as rows (`-` only in a, `+` only in b, ` ` both) and counts.
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * import { lineDiff } from "./diff_view.ts";
 * const d = lineDiff("a\nb\nc\n", "a\nx\nc\n");
 * assert.deepEqual(d.rows.map((r) => r.kind + r.text), [" a", "-b", "+x", " c"]);
 * assert.deepEqual(d.counts, { removed: 1, added: 1, same: 2 });
 * ```
 */
export function lineDiff(a: string, b: string): {
  rows: { kind: " " | "-" | "+"; text: string }[];
  counts: DiffCounts;
} {
  const rows: { kind: " " | "-" | "+"; text: string }[] = [];
  const counts = { removed: 0, added: 0, same: 0 };
  for (
    const change of diffLines(a.endsWith("\n") ? a : a + "\n", b.endsWith("\n") ? b : b + "\n")
  ) {
    const kind = change.added ? "+" : change.removed ? "-" : " ";
    const lines = change.value.replace(/\n$/, "").split("\n");
    for (const text of lines) rows.push({ kind, text });
    if (kind === "+") counts.added += lines.length;
    else if (kind === "-") counts.removed += lines.length;
    else counts.same += lines.length;
  }
  return { rows, counts };
}

/** The diff page body. */
export function diffView(
  base: string,
  a: { id: string; reward: number | null; text: string },
  b: { id: string; reward: number | null; text: string },
): SafeHtml {
  const { rows, counts } = lineDiff(a.text, b.text);
  const link = (id: string) => html`<a href="${base}/rollouts/${encodeURIComponent(id)}">${id}</a>`;
  return html`
    <p
      id="diff-head"><span class="del">− ${link(a.id)} (reward ${a.reward ??
        "–"})</span> · <span class="ins">+ ${link(b.id)} (reward ${b.reward ?? "–"})</span></p>
    <p class="muted"
      id="diff-counts">${counts.removed} line(s) only in ${a.id}, ${counts.added} only in ${b
        .id}, ${counts.same} shared.</p>
    <pre class="diff" id="diff">${rows.map((r) =>
      html`<span class="${
        r.kind === "+" ? "ins" : r.kind === "-" ? "del" : "ctx"
      }">${r.kind} ${r.text}
</span>`
    )}</pre>
  `;
}
