/**
 * Small HTML/text tables for notebook cells, for when a polars DataFrame is more than needed.
 *
 * @module
 */
import { escapeXml } from "./svg.ts";
import { JUPYTER_DISPLAY, type MimeBundle } from "./figure.ts";

/** A table row: column name → cell value. */
export type TableRow = Record<string, string | number | boolean | null | undefined>;

function cell(value: TableRow[string], digits: number): string {
  if (value === null || value === undefined) return "";
  if (typeof value === "number" && !Number.isInteger(value)) return value.toFixed(digits);
  return String(value);
}

/** What {@link table} returns. */
export interface Table {
  rows: TableRow[];
  columns: string[];
  /** Aligned plain text (also what `String(table)` gives). */
  text(): string;
  /** An HTML `<table>`. */
  html(): string;
  toString(): string;
  [JUPYTER_DISPLAY](): MimeBundle;
}

/**
 * A displayable table: renders as HTML in Jupyter and as aligned text in `console.log`/`String()`.
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * import { table } from "./table.ts";
 * const t = table([{ mode: "token_mean", share: 0.5 }]);
 * assert.equal(t.text().includes("token_mean"), true);
 * ```
 */
export function table(
  rows: TableRow[],
  options: { digits?: number; columns?: string[] } = {},
): Table {
  const digits = options.digits ?? 4;
  const columns = options.columns ??
    [...new Set(rows.flatMap((row) => Object.keys(row)))];
  const text = (): string => {
    const cells = rows.map((row) => columns.map((c) => cell(row[c], digits)));
    const widths = columns.map((c, i) => Math.max(c.length, ...cells.map((r) => r[i].length)));
    const line = (values: string[]) => values.map((v, i) => v.padEnd(widths[i])).join("  ");
    return [line(columns), line(widths.map((w) => "-".repeat(w))), ...cells.map(line)].join("\n");
  };
  const html = (): string =>
    `<table><thead><tr>${columns.map((c) => `<th>${escapeXml(c)}</th>`).join("")}</tr></thead>` +
    `<tbody>${
      rows.map((row) =>
        `<tr>${columns.map((c) => `<td>${escapeXml(cell(row[c], digits))}</td>`).join("")}</tr>`
      ).join("")
    }</tbody></table>`;
  return {
    rows,
    columns,
    text,
    html,
    toString: text,
    [JUPYTER_DISPLAY]: (): MimeBundle => ({
      "text/html": html(),
      "text/plain": text(),
    }),
  };
}
