/**
 * Figure helpers: Observable Plot on a linkedom document, inline display in Deno Jupyter,
 * standalone SVG (with `xmlns`) and PNG export (resvg with an explicit DejaVu font).
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * import * as Plot from "@observablehq/plot";
 * import { plot, saveFigure } from "./mod.ts";
 * const fig = plot({ title: "samples per rollout", marks: [Plot.barY([5, 3, 1])] });
 * const dir = await Deno.makeTempDir();
 * const files = await saveFigure(fig, "demo", { dir, png: true });
 * assert.deepEqual(files, [`${dir}/demo.svg`, `${dir}/demo.png`]);
 * await Deno.remove(dir, { recursive: true });
 * ```
 *
 * @module
 */
export { plotDocument } from "./document.ts";
export { toSvgString } from "./svg.ts";
export { DEFAULT_FONT_DIR, defaultFontFiles, type PngOptions, svgToPng } from "./png.ts";
export {
  Figure,
  figuresDir,
  flushOutput,
  JUPYTER_DISPLAY,
  type MimeBundle,
  plot,
  saveFigure,
  show,
  stackFigures,
} from "./figure.ts";
export { type Table, table, type TableRow } from "./table.ts";
/** Observable Plot itself, so that notebooks need a single import. */
export * as Plot from "@observablehq/plot";
