/**
 * Figures for notebooks and scripts: draw with Observable Plot on a linkedom document, show
 * inline in Deno Jupyter, save as SVG or PNG.
 *
 * @module
 */
import { sleep } from "../util/time.ts";
import * as Plot from "@observablehq/plot";
import { plotDocument } from "./document.ts";
import { toSvgString } from "./svg.ts";
import { type PngOptions, svgToPng } from "./png.ts";

/** The MIME bundle a Jupyter front end renders. */
export type MimeBundle = Record<string, string>;

/** The symbol Deno's Jupyter kernel looks up to display a value (`Symbol.for("Jupyter.display")`). */
export const JUPYTER_DISPLAY: unique symbol = Symbol.for(
  "Jupyter.display",
) as typeof JUPYTER_DISPLAY;

/**
 * A drawn figure. As the last expression of a Deno Jupyter cell it renders inline (SVG).
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * import * as Plot from "@observablehq/plot";
 * import { plot } from "./figure.ts";
 * const fig = plot({ marks: [Plot.barY([3, 1, 2])] });
 * assert.equal(fig.svg().includes("<rect"), true);
 * ```
 */
export class Figure {
  /** The element Plot produced (`<svg>` or `<figure>`). */
  readonly element: Element;
  #svg: string | undefined;

  constructor(element: Element) {
    this.element = element;
  }

  /** Standalone SVG (with `xmlns`), cached. */
  svg(): string {
    this.#svg ??= toSvgString(this.element);
    return this.#svg;
  }

  /** PNG bytes rendered with resvg and an explicit font. */
  png(options?: PngOptions): Promise<Uint8Array> {
    return svgToPng(this.svg(), options);
  }

  /**
   * Writes the figure to `path`; the extension (`.svg` or `.png`) picks the format. Creates the
   * parent directory. Returns the path.
   */
  async save(path: string, options?: PngOptions): Promise<string> {
    const lower = path.toLowerCase();
    const slash = path.lastIndexOf("/");
    if (slash > 0) await Deno.mkdir(path.slice(0, slash), { recursive: true });
    if (lower.endsWith(".svg")) await Deno.writeTextFile(path, this.svg());
    else if (lower.endsWith(".png")) await Deno.writeFile(path, await this.png(options));
    else throw new Error(`path: expected a .svg or .png file name, got ${JSON.stringify(path)}`);
    return path;
  }

  /**
   * Shows the figure in the notebook now (a `display_data` output) and waits for the kernel to
   * send it; outside Jupyter it does nothing. End a figure cell with `await figure.display()`
   * rather than a bare `figure`: in headless runs the Deno kernel can report a cell done before
   * its result (the bare expression) reaches nbconvert, and the cell then has no output.
   */
  async display(): Promise<void> {
    await show(this);
    await flushOutput();
  }

  /** The MIME bundle Deno's Jupyter kernel displays. */
  [JUPYTER_DISPLAY](): MimeBundle {
    return { "image/svg+xml": this.svg(), "text/plain": `Figure <${this.element.tagName}>` };
  }
}

/**
 * Draws a Plot figure on the shared linkedom document (the `document` option is filled in).
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * import * as Plot from "@observablehq/plot";
 * import { plot } from "./figure.ts";
 * const fig = plot({ title: "demo", marks: [Plot.lineY([1, 3, 2])] });
 * assert.equal(fig.svg().startsWith("<svg"), true);
 * ```
 */
export function plot(options: Plot.PlotOptions): Figure {
  const element = Plot.plot({ ...options, document: plotDocument() }) as unknown as Element;
  return new Figure(element);
}

/**
 * One figure made of several stacked vertically (each keeps its own scales: a facet per mode
 * shares its y domain, so a panel with fewer rows would show empty ones), under an optional
 * title and subtitle.
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * import * as Plot from "@observablehq/plot";
 * import { plot, stackFigures } from "./figure.ts";
 * const a = plot({ title: "sync", marks: [Plot.barX([1, 2], { y: ["r1", "r2"], x: (d: number) => d })] });
 * const b = plot({ title: "async", marks: [Plot.barX([3], { y: ["r1"], x: (d: number) => d })] });
 * const both = stackFigures([a, b], { title: "timeline" });
 * assert.equal((both.svg().match(/<svg/g) ?? []).length, 3); // the wrapper and two panels
 * assert.match(both.svg(), />timeline</);
 * ```
 */
export function stackFigures(
  figures: readonly Figure[],
  options: { title?: string; subtitle?: string } = {},
): Figure {
  const doc = plotDocument();
  const root = doc.createElement("figure");
  const text = (tag: string, value: string) => {
    const el = doc.createElement(tag);
    el.textContent = value;
    root.appendChild(el);
  };
  if (options.title) text("h2", options.title);
  if (options.subtitle) text("h3", options.subtitle);
  for (const figure of figures) {
    const el = figure.element;
    if (el.tagName.toLowerCase() === "svg") root.appendChild(el.cloneNode(true));
    else for (const child of Array.from(el.children)) root.appendChild(child.cloneNode(true));
  }
  return new Figure(root as unknown as Element);
}

interface JupyterLike {
  display(value: unknown, options?: { raw?: boolean }): Promise<void>;
}

/**
 * Shows a value in the running Jupyter cell (no-op outside a kernel); for showing more than the
 * cell's last expression.
 *
 * @example
 * ```ts
 * import { show } from "./figure.ts";
 * // Displays in a `deno jupyter` cell; does nothing (and does not throw) anywhere else.
 * await show({ [Symbol.for("Jupyter.display")]: () => ({ "text/plain": "hi" }) });
 * ```
 */
export async function show(value: unknown): Promise<void> {
  let jupyter: JupyterLike | undefined;
  try {
    jupyter = (Deno as unknown as { jupyter?: JupyterLike }).jupyter;
  } catch {
    // Outside `deno jupyter`, Deno 2.9 throws on reading `Deno.jupyter` instead of undefined.
    return;
  }
  if (!jupyter) return;
  await jupyter.display(value);
}

/**
 * Waits one macrotask so that Deno's Jupyter kernel forwards what the cell printed before the
 * cell ends. Headless runs (`nbconvert --execute`) otherwise sometimes lose the tail of a cell's
 * `console.log` output: the kernel can report the cell idle before its stdout reaches the
 * client. Call it last in cells whose printed output matters.
 *
 * @example
 * ```ts
 * import { flushOutput } from "./figure.ts";
 * console.log("a table");
 * await flushOutput();
 * ```
 */
export async function flushOutput(): Promise<void> {
  await sleep(20);
}

/**
 * Directory figures are written to: `$REINS_FIGURES_DIR`, or `experiments/figures/` at the repo
 * root (resolved from this module's location, so notebooks and scripts agree).
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * import { figuresDir } from "./figure.ts";
 * // Unless $REINS_FIGURES_DIR is set:
 * assert.ok(figuresDir().endsWith("experiments/figures"));
 * ```
 */
export function figuresDir(): string {
  const env = Deno.env.get("REINS_FIGURES_DIR");
  if (env) return env;
  return decodeURIComponent(new URL("../../experiments/figures", import.meta.url).pathname);
}

/**
 * Saves `figure` as `<figuresDir()>/<name>.svg` (and `.png` when `png` is true); returns the
 * paths written.
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * import * as Plot from "@observablehq/plot";
 * import { plot, saveFigure } from "./figure.ts";
 * const dir = await Deno.makeTempDir();
 * const [svg] = await saveFigure(plot({ marks: [Plot.dot([[0, 0]])] }), "demo", { dir });
 * assert.equal(svg.endsWith("demo.svg"), true);
 * await Deno.remove(dir, { recursive: true });
 * ```
 */
export async function saveFigure(
  figure: Figure,
  name: string,
  options: { dir?: string; png?: boolean } = {},
): Promise<string[]> {
  if (!/^[A-Za-z0-9._-]+$/.test(name)) {
    throw new Error(`name: expected letters, digits, . _ - only, got ${JSON.stringify(name)}`);
  }
  const dir = options.dir ?? figuresDir();
  const paths = [await figure.save(`${dir}/${name}.svg`)];
  if (options.png) paths.push(await figure.save(`${dir}/${name}.png`));
  return paths;
}
