/**
 * The rollout list: filter form, table and paging links.
 *
 * @module
 */
import { RolloutModeSchema, RolloutStatusSchema } from "../schema.ts";
import type { RolloutListQuery } from "../schema/ui.ts";
import { html, type SafeHtml, tableHead } from "./html.ts";
import { badge, fmtNum, fmtTime } from "./layout.ts";
import { harnessOf, type RolloutListPage, type Snippet } from "./query.ts";
import type { RunIndex } from "./run_index.ts";

/** The query string of `query` with `after` replaced (undefined: dropped). */
export function queryString(query: RolloutListQuery, after?: string | null): string {
  const params = new URLSearchParams();
  for (
    const key of [
      "q",
      "status",
      "mode",
      "run",
      "group",
      "step",
      "role",
      "harness",
      "reward_min",
      "reward_max",
      "flagged",
    ]
  ) {
    const value = query[key as keyof RolloutListQuery];
    if (value !== undefined && value !== null) params.set(key, String(value));
  }
  if (query.order !== "newest") params.set("order", query.order);
  if (query.sort !== "created") params.set("sort", query.sort);
  if (query.limit !== 50) params.set("limit", String(query.limit));
  if (after) params.set("after", after);
  const text = params.toString();
  return text ? `?${text}` : "";
}

function select(name: string, options: readonly string[], value: string | undefined): SafeHtml {
  return html`<select name="${name}" id="f-${name}"><option value="">any</option>${
    options.map((o) => html`<option value="${o}" ${o === value ? "selected" : ""}>${o}</option>`)
  }</select>`;
}

/** The filter form. */
export function filterForm(base: string, query: RolloutListQuery): SafeHtml {
  const text = (name: keyof RolloutListQuery, label: string, size: number) =>
    html`<label>${label} <input name="${name}" id="f-${name}" size="${size}" value="${
      String(query[name] ?? "")
    }"></label>`;
  return html`<form class="filters" method="get" action="${base}/rollouts" id="filters">
${text("q", "search prompts, responses, tool calls", 28)}
<label>status ${select("status", RolloutStatusSchema.options, query.status)}</label>
<label>mode ${select("mode", RolloutModeSchema.options, query.mode)}</label>
${text("group", "group", 14)}${text("step", "step label", 4)}
<label>role ${select("role", ["train", "eval"], query.role)}</label>
${text("harness", "harness", 10)}${text("reward_min", "reward ≥", 4)}${
    text("reward_max", "reward ≤", 4)
  }
<label>flagged ${select("flagged", ["yes", "no"], query.flagged)}</label>
<label>order ${html`<select name="order" id="f-order">${
    (["newest", "oldest"] as const).map((o) =>
      html`<option value="${o}" ${o === query.order ? "selected" : ""}>${o} first</option>`
    )
  }</select>`}</label>
${query.sort !== "created" ? html`<input type="hidden" name="sort" value="${query.sort}">` : ""}
<label>per page <input name="limit" size="4" value="${query.limit}"></label>
<button type="submit" id="apply">Apply</button> <a href="${base}/rollouts">clear</a>
</form>`;
}

/** A column header that sorts by `key` (a second click flips the direction). */
function sortHeader(
  base: string,
  query: RolloutListQuery,
  key: string,
  label: string,
  numeric = false,
): SafeHtml {
  const current = query.sort === key ? "asc" : query.sort === `-${key}` ? "desc" : null;
  const nextSort = current === "desc" ? key : `-${key}`;
  const href = `${base}/rollouts${
    queryString({ ...query, sort: nextSort as RolloutListQuery["sort"] })
  }`;
  const arrow = current === "asc" ? " ▲" : current === "desc" ? " ▼" : "";
  return html`
    <th class="${numeric ? "num" : ""}"
      aria-sort="${current === "asc"
        ? "ascending"
        : current === "desc"
        ? "descending"
        : "none"}"><a class="sort" id="sort-${key}" href="${href}">${label}${arrow}</a></th>
  `;
}

/** A search snippet with its match highlighted. */
function snippetView(snippet: Snippet): SafeHtml {
  return html`${snippet.before}<mark>${snippet.match}</mark>${snippet.after}`;
}

/**
 * A training rollout's step as the overview numbers it (its 0-based label + 1), linked to the
 * step's drill-down; other labels (an eval's steps done) as they are.
 */
function stepCell(base: string, label: string | undefined, role: string | undefined): SafeHtml {
  if (label === undefined) return html`–`;
  const n = Number(label);
  if (role === "eval" || !Number.isInteger(n)) return html`${label}`;
  return html`<a href="${base}/steps/${n + 1}" title="step label ${label}">${n + 1}</a>`;
}

/** The table and paging links (the live region's content). */
export function rolloutTable(
  base: string,
  query: RolloutListQuery,
  page: RolloutListPage,
  index: RunIndex,
): SafeHtml {
  const rows = page.items.map((r) => {
    const flags = index.flags.get(r.rollout_id);
    const verdict = index.verdicts.get(r.rollout_id);
    return html`
      <tr data-rollout="${r.rollout_id}" data-status="${r.status}">
        <td><a href="${base}/rollouts/${encodeURIComponent(r.rollout_id)}">${r
          .rollout_id}</a>${page.snippets?.[r.rollout_id]
          ? html`<div class="snippet">${snippetView(page.snippets[r.rollout_id])}</div>`
          : ""}</td>
        <td>${badge(r.status)}</td>
        <td>${r.mode}</td>
        <td>${r.group_id
          ? html`<a href="${base}/rollouts?group=${
            encodeURIComponent(r.group_id)
          }">${r.group_id}</a>`
          : "–"}</td>
        <td>${stepCell(base, r.labels.step, r.labels.role)}${r.labels.role
          ? html`
            <span class="muted">${r.labels.role}</span>
          `
          : ""}</td>
        <td>${harnessOf(r) ?? "–"}</td>
        <td class="num">${fmtNum(r.reward)}</td>
        <td class="num">${r.attempts.length}</td>
        <td class="num">${r.policy_version_min === null
          ? "–"
          : r.policy_version_min === r.policy_version_max
          ? r.policy_version_min
          : `${r.policy_version_min}–${r.policy_version_max}`}</td>
        <td>${flags?.worst
          ? html`<span class="sev-${flags.worst}" title="${
            flags.flags.map((f) => `${f.monitor}: ${f.message}`).join("\n")
          }">⚑ ${flags.flags.length}</span>`
          : flags
          ? html`<span class="muted">clean</span>`
          : ""}${verdict
          ? html`
            <span class="muted">(${verdict.verdict})</span>
          `
          : ""}</td>
        <td>${fmtTime(r.created_at)}</td>
        <td>${fmtTime(r.updated_at)}</td>
      </tr>
    `;
  });
  const nav = html`<p class="paging">
<a href="${base}/rollouts${queryString(query)}">first page</a>
${
    page.next
      ? html`
        · <a id="next-page" href="${base}/rollouts${queryString(query, page.next)}">next page →</a>
      `
      : html`
        · <span class="muted">last page</span>
      `
  }
<span class="muted"> · ${page.items.length} shown, ${page.scanned} read${
    page.partial
      ? query.sort !== "created"
        ? " (scan budget reached: sorted over the newest rollouts read)"
        : " (scan budget reached; the next page continues)"
      : ""
  }</span></p>`;
  return html`
    <div class="scroll-x">
      <table id="rollouts">
        ${tableHead([
          "rollout",
          "status",
          "mode",
          "group",
          sortHeader(base, query, "step", "step"),
          "harness",
          sortHeader(base, query, "reward", "reward", true),
          sortHeader(base, query, "attempts", "attempts", true),
          { num: "policy" },
          "flags",
          "created",
          sortHeader(base, query, "updated", "updated"),
        ])}
        <tbody>${rows}</tbody>
      </table>
    </div>
    ${page.items.length === 0 ? html`<p class="muted" id="empty">No rollout matches.</p>` : ""}
    ${nav}
  `;
}
