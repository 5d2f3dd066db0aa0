/**
 * A tiny HTML template helper: every interpolated value is escaped unless it is already
 * {@link SafeHtml}, so model output can never become markup by accident.
 *
 * @module
 */

/** Markup that is already safe to emit (built by {@link html} or {@link unsafeRaw}). */
export class SafeHtml {
  readonly value: string;
  constructor(value: string) {
    this.value = value;
  }
  toString(): string {
    return this.value;
  }
}

const ESCAPES: Record<string, string> = {
  "&": "&amp;",
  "<": "&lt;",
  ">": "&gt;",
  '"': "&quot;",
  "'": "&#39;",
};

/**
 * Escapes text for an HTML text node or a quoted attribute.
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * import { escapeHtml } from "./html.ts";
 * assert.equal(escapeHtml("<script>alert(1)</script>"), "&lt;script&gt;alert(1)&lt;/script&gt;");
 * ```
 */
export function escapeHtml(text: string): string {
  return text.replace(/[&<>"']/g, (ch) => ESCAPES[ch]);
}

/** Values a template accepts. Arrays are concatenated; null, undefined and false vanish. */
export type HtmlValue =
  | SafeHtml
  | string
  | number
  | boolean
  | null
  | undefined
  | readonly HtmlValue[];

function render(value: HtmlValue): string {
  if (value === null || value === undefined || value === false) return "";
  if (value instanceof SafeHtml) return value.value;
  if (Array.isArray(value)) return value.map(render).join("");
  return escapeHtml(String(value));
}

/**
 * Tagged template producing {@link SafeHtml}; interpolations are escaped.
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * import { html } from "./html.ts";
 * const text = "<b>hi</b>";
 * assert.equal(html`<p>${text}</p>`.value, "<p>&lt;b&gt;hi&lt;/b&gt;</p>");
 * ```
 */
export function html(strings: TemplateStringsArray, ...values: HtmlValue[]): SafeHtml {
  let out = strings[0];
  for (let i = 0; i < values.length; i++) out += render(values[i]) + strings[i + 1];
  return new SafeHtml(out);
}

/** Marks trusted markup (our own SVG charts, pre-escaped strings) as safe. */
export function unsafeRaw(markup: string): SafeHtml {
  return new SafeHtml(markup);
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
 * const head = tableHead(["model", { num: "version" }]).value;
 * assert.match(head, /<thead>\s*<tr><th>model<\/th><th class="num">version<\/th><\/tr>\s*<\/thead>/);
 * ```
 */
export function tableHead(columns: readonly HeadColumn[]): SafeHtml {
  const cells = columns.map((c) =>
    c instanceof SafeHtml
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
