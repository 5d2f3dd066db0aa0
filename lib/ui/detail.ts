/**
 * The rollout detail page: input, status timeline and attempts with their logs, every model
 * call (decoded prompt and response, reasoning and tool calls shown as such, token counts,
 * latency, policy version), the assembled samples down to the token (trained vs context
 * tokens, logprob shading, where each call's response starts, why each sample split), monitor
 * flags, rewards and custom events.
 *
 * @module
 */
import { capText, PAYLOAD_LIMITS, prettyJsonText, prettyJsonValue } from "./payload.ts";
import { parseOutput } from "../tokens/parse_output.ts";
import { assembleRollout, type AssemblyResult } from "../samples/mod.ts";
import type {
  ChatMessage,
  MergeStrategy,
  ModelRequestEvent,
  Rollout,
  RolloutEvent,
} from "../schema.ts";
import { isReinsEvent, MergeStrategySchema } from "../schema.ts";
import {
  AUDIT_VERDICT_EVENT,
  AuditVerdictSchema,
  MONITOR_FLAGS_EVENT,
  type MonitorFlag,
  MonitorFlagsDataSchema,
} from "../schema/ui.ts";
import type { ChatTokenizer } from "../tokens/types.ts";
import { html, type HtmlValue, type SafeHtml, tableHead } from "./html.ts";
import { badge, fmtNum, fmtTime } from "./layout.ts";
import { tokenView } from "./token_view.ts";

/** What the detail view needs. */
export interface DetailInput {
  base: string;
  rollout: Rollout;
  events: readonly RolloutEvent[];
  tokenizer?: ChatTokenizer;
  strategy: MergeStrategy;
}

/** Flags stored on a rollout by the monitors, over all its attempts. */
export function flagsOf(events: readonly RolloutEvent[]): MonitorFlag[] {
  const out: MonitorFlag[] = [];
  for (const e of events) {
    if (!isReinsEvent(e, MONITOR_FLAGS_EVENT)) continue;
    const parsed = MonitorFlagsDataSchema.safeParse(e.payload.data);
    if (parsed.success) out.push(...parsed.data.flags);
  }
  return out;
}

/** Assembles the rollout's samples; assembly errors become a message instead of a 500. */
export function assembleForView(
  events: readonly RolloutEvent[],
  rolloutId: string,
  strategy: MergeStrategy,
  tokenizer?: ChatTokenizer,
): AssemblyResult | string {
  try {
    return assembleRollout(events, {
      strategy,
      rollout_id: rolloutId,
      ...(tokenizer ? { tokenizer } : {}),
    });
  } catch (err) {
    return err instanceof Error ? err.message : String(err);
  }
}

function pre(text: string): SafeHtml {
  return html`<pre>${capText(text, 2 * PAYLOAD_LIMITS.maxChars)}</pre>`;
}

function messageView(m: ChatMessage): SafeHtml {
  return html`<div class="msg"><div class="role">${m.role}${m.name ? ` (${m.name})` : ""}${
    m.tool_call_id ? ` · result of ${m.tool_call_id}` : ""
  }</div>
${
    m.reasoning_content
      ? html`<div class="reasoning"><b>reasoning</b>${pre(m.reasoning_content)}</div>`
      : ""
  }
${m.content ? pre(m.content) : ""}
${
    (m.tool_calls ?? []).map((call) =>
      html`<div class="toolcall"><b>tool call</b> <code>${call.function.name}</code>${
        pre(prettyJson(call.function.arguments))
      }</div>`
    )
  }</div>`;
}

const prettyJson = (text: string) => prettyJsonText(text);

function responseView(event: ModelRequestEvent, tokenizer?: ChatTokenizer): SafeHtml {
  const p = event.payload;
  const text = p.response_text ??
    (tokenizer && p.response_token_ids.length ? tokenizer.decode(p.response_token_ids) : null);
  if (text === null) {
    return html`<p class="muted">No response text recorded and no tokenizer configured; ids:</p>
${pre(Array.from(p.response_token_ids).join(" "))}`;
  }
  const out = parseOutput(text, { newToolCallId: () => "" });
  return html`<div class="response">
${out.reasoning ? html`<div class="reasoning"><b>reasoning</b>${pre(out.reasoning)}</div>` : ""}
${out.content ? html`<div><b>content</b>${pre(out.content)}</div>` : ""}
${
    out.tool_calls.map((call) =>
      html`<div class="toolcall"><b>tool call</b> <code>${call.name}</code>${
        pre(prettyJson(call.arguments))
      }</div>`
    )
  }
${
    !out.reasoning && !out.content && out.tool_calls.length === 0
      ? html`<p class="muted">(empty response)</p>`
      : ""
  }
<details><summary>raw response text</summary>${pre(text)}</details></div>`;
}

/** Below this probability correlation a call's alignment shows as an error (the monitor's). */
const MIN_ALIGNMENT = 0.99;

/** The trainer's per-call `alignment` events, by the call's seq. */
function alignmentByCall(events: readonly RolloutEvent[]): Map<number, Record<string, unknown>> {
  const out = new Map<number, Record<string, unknown>>();
  for (const e of events) {
    if (!isReinsEvent(e, "alignment")) continue;
    const d = e.payload.data;
    if (typeof d !== "object" || d === null || Array.isArray(d)) continue;
    if (typeof d.request_seq === "number") out.set(d.request_seq, d);
  }
  return out;
}

function alignmentView(data: Record<string, unknown> | undefined): HtmlValue {
  if (!data) return "";
  const corr = typeof data.corr === "number" ? data.corr : null;
  const dl = typeof data.max_abs_dlogprob === "number" ? data.max_abs_dlogprob : null;
  const text = `alignment r ${fmtNum(corr, 4)}, max |Δlogprob| ${fmtNum(dl, 4)}`;
  return corr !== null && corr < MIN_ALIGNMENT
    ? html`
      · <span class="err align">${text}</span>
    `
    : html`
      · <span class="align">${text}</span>
    `;
}

function callsView(input: DetailInput, attemptIndex: Map<string, number>): SafeHtml {
  const calls = input.events.filter((e): e is ModelRequestEvent => e.type === "model_request");
  if (calls.length === 0) return html`<p class="muted">No model calls yet.</p>`;
  const alignment = alignmentByCall(input.events);
  let previous: ChatMessage[] = [];
  return html`${
    calls.map((e) => {
      const p = e.payload;
      const messages = p.messages ?? [];
      // Each call repeats the whole history; show only what is new since the previous call.
      let shared = 0;
      while (
        shared < messages.length && shared < previous.length &&
        messages[shared].role === previous[shared].role &&
        messages[shared].content === previous[shared].content
      ) shared++;
      previous = messages;
      const failed = p.http_status >= 400 || p.error !== null;
      return html`<details class="call" id="call-${e.seq}"><summary>
<b>seq ${e.seq}</b> · attempt ${attemptIndex.get(e.attempt_id) ?? "?"} · ${p.flavor} ·
policy v${p.policy_version} · ${p.prompt_token_ids.length} → ${p.response_token_ids.length} tokens ·
${fmtNum(p.latency_ms, 0)} ms · finish ${p.finish_reason ?? "–"}${
        failed
          ? html`
            · <span class="err">HTTP ${p.http_status}${p.error ? `: ${p.error}` : ""}</span>
          `
          : ""
      }${p.mode === "substitute" ? " · substitute" : ""}${
        alignmentView(alignment.get(e.seq))
      }</summary>
<p class="muted">upstream ${p.upstream ?? "–"} · retries ${p.retry_count} · segment ${
        p.segment
          ? `${p.segment.conversation}#${p.segment.index}${
            p.segment.opened_by ? ` (${p.segment.opened_by})` : ""
          }`
          : "–"
      }${p.client_disconnected ? " · client disconnected" : ""}</p>
${
        messages.length
          ? html`<h4>messages ${
            shared ? html`<span class="muted">(${shared} earlier unchanged)</span>` : ""
          }</h4>
${messages.slice(shared).map(messageView)}`
          : ""
      }
<h4>response</h4>${responseView(e, input.tokenizer)}
${
        input.tokenizer
          ? html`<details><summary>decoded prompt (${p.prompt_token_ids.length} tokens)</summary>${
            pre(input.tokenizer.decode(p.prompt_token_ids))
          }</details>`
          : ""
      }</details>`;
    })
  }`;
}

function samplesView(input: DetailInput, result: AssemblyResult | string): SafeHtml {
  const links = MergeStrategySchema.options.map((s) =>
    s === input.strategy
      ? html`<b>${s}</b>`
      : html`<a href="${input.base}/rollouts/${
        encodeURIComponent(input.rollout.rollout_id)
      }?strategy=${s}#samples">${s}</a>`
  );
  const header = html`<p>strategy: ${links.map((l, k) => html`${k ? " · " : ""}${l}`)}</p>
<p class="legend"><span class="tk ctx">context (loss_mask 0)</span>
<span class="tk trn" style="--u:0.1">trained, likely</span>
<span class="tk trn" style="--u:0.8">trained, unlikely (shade = 1 − p)</span>
<span class="seg">seq N</span> response of call N starts</p>`;
  if (typeof result === "string") {
    return html`${header}<p class="err">Assembly failed: ${result}</p>`;
  }
  const m = result.metrics;
  const breakBySeq = new Map(result.breaks.map((b) => [b.seq, b]));
  const summary = html`<p>${m.samples} sample(s) from ${m.calls_used} of ${m.calls} call(s) ·
${m.tokens_total} tokens, ${m.tokens_trained} trained${
    m.off_policy_samples
      ? html`
        · <span class="err">${m.off_policy_samples} off-policy</span>
      `
      : ""
  } · breaks: ${
    Object.entries(m.break_reasons).filter(([, v]) => v > 0).map(([k, v]) => `${k} ${v}`).join(
      ", ",
    ) ||
    "none"
  }</p>`;
  const samples = result.samples.map((s, k) => {
    const first = s.provenance.request_seqs[0];
    const diagnosis = s.provenance.split_reason !== null ? breakBySeq.get(first) : undefined;
    const trained = s.loss_mask.reduce((a, b) => a + b, 0);
    return html`<div class="sample" id="sample-${k}" data-split="${
      s.provenance.split_reason ?? ""
    }">
<b>sample ${k}</b> · ${s.tokens.length} tokens (${trained} trained) · calls ${
      s.provenance.request_seqs.map((seq) =>
        html`
          <a href="#call-${seq}">${seq}</a>
        `
      )
    }· policy v${s.policy_version} · reward ${fmtNum(s.reward)}${
      s.provenance.off_policy
        ? html`
          · <span class="err">off-policy</span>
        `
        : ""
    }
${
      s.provenance.split_reason
        ? html`<div class="split"><b>split: <span class="split-reason">${s.provenance.split_reason}</span></b>${
          diagnosis
            ? html`
              — ${diagnosis.detail} <span
                class="muted">(basis ${diagnosis.basis}; vs call seq ${diagnosis.previous_seq ??
                  "–"}, first differing prompt token #${diagnosis.first_diff_token})</span>
              ${diagnosis.context_text !== null
                ? html`<div>context: <code>${diagnosis.context_text}</code> · expected: <code>${
                  diagnosis.expected_text ?? ""
                }</code> · actual: <code>${diagnosis.actual_text ?? ""}</code></div>`
                : html`<div>expected ids ${diagnosis.expected_ids.join(" ")} · actual ids ${
                  diagnosis.actual_ids.join(" ")
                }</div>`}
            `
            : ""
        }</div>`
        : ""
    }
${tokenView(s, input.tokenizer)}</div>`;
  });
  const dropped = result.dropped.length
    ? html`
      <h3>Calls left out</h3>
      <ul>${result.dropped.map((d) =>
        html`<li><a href="#call-${d.seq}">seq ${d.seq}</a>: ${d.reason} — ${d.detail}</li>`
      )}</ul>
    `
    : "";
  const breaks = result.breaks.length
    ? html`
      <h3>Prefix breaks</h3>
      <table>
        ${tableHead(["call", "vs", "reason", "basis", "detail"])}
        <tbody>${result.breaks.map((b) =>
          html`
            <tr class="break">
              <td>${b.seq}</td>
              <td>${b.previous_seq ?? "–"}</td>
              <td>${b.reason}</td>
              <td>${b.basis}</td>
              <td>${b.detail}</td>
            </tr>
          `
        )}</tbody>
      </table>
    `
    : "";
  return html`${header}${summary}${samples}${breaks}${dropped}`;
}

function flagsView(input: DetailInput): SafeHtml {
  const flags = flagsOf(input.events);
  const checked = input.events.some((e) => isReinsEvent(e, MONITOR_FLAGS_EVENT));
  const verdicts = input.events.flatMap((e) => {
    if (!isReinsEvent(e, AUDIT_VERDICT_EVENT)) return [];
    const parsed = AuditVerdictSchema.safeParse(e.payload.data);
    return parsed.success ? [parsed.data] : [];
  });
  const list = flags.length
    ? html`<ul id="flags">${
      flags.map((f) =>
        html`<li class="flag"><span class="sev-${f.severity}">[${f.severity}] ${f.monitor}</span>: ${f.message}
<ul>${
          f.evidence.slice(0, 20).map((e) =>
            html`<li>${
              e.seq !== null
                ? html`
                  <a href="#call-${e.seq}">seq ${e.seq}</a>
                `
                : ""
            }<span class="muted">${e.source}</span>
<code>${e.excerpt}</code></li>`
          )
        }</ul></li>`
      )
    }</ul>`
    : html`<p class="muted">${
      checked ? "Monitors found nothing." : "Not checked by monitors yet."
    }</p>`;
  return html`${list}${
    verdicts.map((v) =>
      html`<p class="verdict">Auditor (${v.model}): <b>${v.verdict}</b> — ${v.reason}</p>`
    )
  }`;
}

/** The detail page's live region content. */
export function detailFragment(input: DetailInput): SafeHtml {
  const { rollout, events, base } = input;
  const id = encodeURIComponent(rollout.rollout_id);
  const attemptIndex = new Map(rollout.attempts.map((a) => [a.attempt_id, a.index]));
  const statusEvents = events.filter((e) => e.type === "status");
  const logs = new Map<string, string[]>();
  for (const e of events) {
    if (e.type !== "log") continue;
    const list = logs.get(e.attempt_id) ?? [];
    list.push(
      e.payload.stream === "stdout" ? e.payload.text : `[${e.payload.stream}] ${e.payload.text}`,
    );
    logs.set(e.attempt_id, list);
  }
  const others = events.filter((e) =>
    e.type === "reward" ||
    (e.type === "custom" && e.payload.name !== MONITOR_FLAGS_EVENT &&
      e.payload.name !== AUDIT_VERDICT_EVENT && e.payload.name !== "alignment")
  );
  const result = assembleForView(events, rollout.rollout_id, input.strategy, input.tokenizer);
  return html`
    <h1>Rollout <span id="rollout-id">${rollout.rollout_id}</span> ${badge(rollout.status)}</h1>
    <p>group ${rollout.group_id} · mode ${rollout.mode} · reward <b id="reward">${fmtNum(
      rollout.reward,
    )}</b> ·
    policy ${rollout.policy_version_min ?? "–"}–${rollout.policy_version_max ??
      "–"} · created ${fmtTime(rollout.created_at)} · labels ${Object.entries(rollout.labels).map((
        [k, v],
      ) =>
        html`
          <code>${k}=${v}</code>
        `
      )}</p>
    <p><a id="export" href="${base}/rollouts/${id}/export.json?strategy=${input
      .strategy}" download>export JSON</a> ·
    <a id="notebook" href="${base}/rollouts/${id}/notebook.ipynb" download>open in a notebook (.ipynb)</a></p>
    <h2>Input</h2>${pre(prettyJsonValue(rollout.input))}
    <h2>Monitor flags</h2>${flagsView(input)}
    <h2>Status timeline</h2><table id="timeline">
      ${tableHead(["time", "from", "to", "attempt", "reason"])}
      <tbody>${statusEvents.map((e) =>
        e.type === "status"
          ? html`
            <tr>
              <td>${fmtTime(e.created_at)}</td>
              <td>${e.payload.from ?? "–"}</td>
              <td>${badge(e.payload.to)}</td>
              <td>${attemptIndex.get(e.attempt_id) ?? "–"}</td>
              <td>${e.payload.reason ?? ""}</td>
            </tr>
          `
          : ""
      )}</tbody>
    </table>
    <h2>Attempts</h2><table id="attempts">
      ${tableHead(["#", "status", "started", "ended", "exit", "worker", "error", "info"])}
      <tbody>${rollout.attempts.map((a) =>
        html`
          <tr>
            <td>${a.index}</td>
            <td>${badge(a.status)}</td>
            <td>${fmtTime(a.started_at)}</td>
            <td>${fmtTime(a.ended_at)}</td>
            <td>${a.exit_code ?? "–"}</td>
            <td>${a.worker ?? "–"}</td>
            <td class="err">${a.error ?? ""}</td>
            <td><code>${Object.keys(a.info).length ? JSON.stringify(a.info) : ""}</code></td>
          </tr>
        `
      )}</tbody>
    </table>
    ${rollout.attempts.map((a) => {
      const text = (logs.get(a.attempt_id) ?? []).join("");
      return text
        ? html`
          <details
            id="logs-${a.index}"><summary>logs of attempt ${a.index} (${text
              .length} chars)</summary>${pre(
                text.length > 100_000 ? "…" + text.slice(-100_000) : text,
              )}</details>
        `
        : "";
    })}
    <h2>Model calls</h2>${callsView(input, attemptIndex)}
    <h2 id="samples">Samples</h2>${samplesView(input, result)}
    <h2>Rewards and custom events</h2>${others.length
      ? html`
        <table id="events">
          ${tableHead(["seq", "type", "name", "value / data"])}
          <tbody>${others.map((e) =>
            e.type === "reward"
              ? html`
                <tr>
                  <td>${e.seq}</td>
                  <td>reward</td>
                  <td>${e.payload.name}</td>
                  <td>${e.payload.value}${Object.keys(e.payload.info).length
                    ? html`
                      <code>${JSON.stringify(e.payload.info)}</code>
                    `
                    : ""}</td>
                </tr>
              `
              : e.type === "custom"
              ? html`
                <tr>
                  <td>${e.seq}</td>
                  <td>custom</td>
                  <td>${e.payload.name}</td>
                  <td><code>${JSON.stringify(e.payload.data).slice(0, 2_000)}</code></td>
                </tr>
              `
              : ""
          )}</tbody>
        </table>
      `
      : html`<p class="muted">None.</p>`}
  `;
}
