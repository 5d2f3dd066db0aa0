/**
 * The UI's HTML templates: Hono's `html` tagged template and `raw`, typed for synchronous,
 * server-rendered pages. Every interpolated string is escaped (Hono's escaper: `& < > " '`)
 * unless it is already {@link SafeHtml}, so model output can never become markup by accident.
 *
 * Two rules differ from a plain `hono/html` template: interpolations are typed
 * ({@link HtmlValue}: no `true`, which Hono drops silently, and no promises), and {@link html}
 * always returns markup, never a promise.
 *
 * @module
 */
import { html as honoHtml, raw } from "hono/html";
import { escapeToBuffer, type HtmlEscapedString } from "hono/utils/html";

/**
 * Markup that is already safe to emit (built by {@link html} or {@link unsafeRaw}): Hono's
 * escaped string, so it can be returned from a handler or nested in any Hono template.
 */
export type SafeHtml = HtmlEscapedString;

/**
 * Values a template accepts. Arrays are concatenated; null, undefined and false vanish (write
 * `${String(flag)}` to show a boolean).
 */
export type HtmlValue =
  | SafeHtml
  | string
  | number
  | false
  | null
  | undefined
  | readonly HtmlValue[];

/**
 * Escapes text for an HTML text node or a quoted attribute.
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * import { escapeHtml } from "./html.ts";
 * assert.equal(escapeHtml("<script>alert(1)</script>"), "&lt;script&gt;alert(1)&lt;/script&gt;");
 * assert.equal(escapeHtml(`"a" & 'b'`), "&quot;a&quot; &amp; &#39;b&#39;");
 * ```
 */
export function escapeHtml(text: string): string {
  const buffer: [string] = [""];
  escapeToBuffer(text, buffer);
  return buffer[0];
}

/**
 * Tagged template producing {@link SafeHtml}; interpolations are escaped.
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * import { html } from "./html.ts";
 * const text = "<b>hi</b>";
 * assert.equal(String(html`<p>${text}</p>`), "<p>&lt;b&gt;hi&lt;/b&gt;</p>");
 * assert.equal(String(html`<p>${[1, null, false, html`<i>x</i>`]}</p>`), "<p>1<i>x</i></p>");
 * ```
 */
export function html(strings: TemplateStringsArray, ...values: HtmlValue[]): SafeHtml {
  const out = honoHtml(strings, ...values);
  // Only a promise among the values makes Hono answer a promise; HtmlValue admits none.
  if (out instanceof Promise) throw new TypeError("html: a value was a promise");
  return out;
}

/**
 * Marks trusted markup (our own SVG charts, pre-escaped strings) as safe.
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * import { html, unsafeRaw } from "./html.ts";
 * assert.equal(String(html`<p>${unsafeRaw("<br>")}</p>`), "<p><br></p>");
 * ```
 */
export function unsafeRaw(markup: string): SafeHtml {
  return raw(markup);
}

/**
 * Whether a value is {@link SafeHtml} (a string object Hono marked as escaped).
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * import { html, isSafeHtml } from "./html.ts";
 * assert.equal(isSafeHtml(html`<b>x</b>`), true);
 * assert.equal(isSafeHtml("<b>x</b>"), false);
 * ```
 */
export function isSafeHtml(value: unknown): value is SafeHtml {
  return value instanceof String && (value as Partial<HtmlEscapedString>).isEscaped === true;
}

/**
 * A column of {@link tableHead}: its title, `{ num: title }` for a right-aligned number column,
 * or ready markup (a sortable header).
 */
export type HeadColumn = string | { num: string } | SafeHtml;

/**
 * A table's `<thead>` with one `<th>` per column.
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * import { tableHead } from "./html.ts";
 * const head = String(tableHead(["model", { num: "version" }]));
 * assert.match(head, /<thead>\s*<tr><th>model<\/th><th class="num">version<\/th><\/tr>\s*<\/thead>/);
 * ```
 */
export function tableHead(columns: readonly HeadColumn[]): SafeHtml {
  // SafeHtml is typed as a string but is a String object at run time: test it first.
  const cells = columns.map((c) =>
    isSafeHtml(c)
      ? c
      : typeof c === "string"
      ? html`<th>${c}</th>`
      : html`<th class="num">${c.num}</th>`
  );
  return html`
    <thead>
      <tr>${cells}</tr>
    </thead>
  `;
}
