/**
 * Page chrome shared by every UI page: navigation, the live-update hook and small formatters.
 *
 * @module
 */
import { html, type HtmlValue, type SafeHtml } from "./html.ts";

/** What every page needs to render its chrome. */
export interface PageContext {
  /** Where the UI is mounted (e.g. `/ui`). */
  base: string;
  /** Store seq when the page was rendered; live updates continue from there. */
  seq: number;
}

/**
 * A full page. Regions marked `data-live` are re-fetched by the client script when the change
 * feed reports something relevant (no full reloads).
 */
export function page(ctx: PageContext, title: string, active: string, body: HtmlValue): SafeHtml {
  const nav = [
    ["overview", "Overview", `${ctx.base}/`],
    ["rollouts", "Rollouts", `${ctx.base}/rollouts`],
    ["runs", "Runs", `${ctx.base}/runs`],
    ["metrics", "Metrics", `${ctx.base}/metrics`],
    ["proxy", "Proxy", `${ctx.base}/proxy`],
  ].map(([id, label, href]) =>
    html`<a href="${href}" class="${id === active ? "active" : ""}">${label}</a>`
  );
  return html`
    <!doctype html>
    <html lang="en">
      <head>
        <meta charset="utf-8">
        <meta name="viewport" content="width=device-width, initial-scale=1">
        <title>${title} · reins</title>
        <link rel="stylesheet" href="${ctx.base}/static/app.css">
        <script src="${ctx.base}/static/app.js" defer></script>
      </head>
      <body data-base="${ctx.base}" data-seq="${ctx.seq}">
        <header><span class="brand">reins</span><nav>${nav}</nav>
    <span id="live" class="live" title="live updates">○ connecting</span></header>
        <main>${body}</main>
      </body>
    </html>
  `;
}

/** A live region: the client re-fetches `url` and swaps the content when `match` changes. */
export function liveRegion(
  id: string,
  url: string,
  match: { rollout?: string; types?: string },
  content: HtmlValue,
): SafeHtml {
  return html`<div id="${id}" data-live="${url}" data-live-rollout="${match.rollout ?? ""}"
  data-live-types="${match.types ?? ""}">${content}</div>`;
}

/** Epoch ms as `YYYY-MM-DD HH:MM:SS` UTC. */
export function fmtTime(ms: number | null | undefined): string {
  if (ms === null || ms === undefined || !Number.isFinite(ms)) return "–";
  return new Date(ms).toISOString().replace("T", " ").slice(0, 19);
}

/** A number with up to `digits` decimals, or `–`. */
export function fmtNum(value: number | null | undefined, digits = 3): string {
  if (value === null || value === undefined || !Number.isFinite(value)) return "–";
  return Number.isInteger(value) ? String(value) : value.toFixed(digits);
}

/** A status badge. */
export function badge(status: string): SafeHtml {
  return html`<span class="badge s-${status}">${status}</span>`;
}
