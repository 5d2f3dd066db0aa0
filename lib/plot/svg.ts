/**
 * Turns a Plot result (an `<svg>` or a `<figure>` holding title, legend, svg and caption) into one
 * standalone SVG document string that viewers and resvg accept.
 *
 * @module
 */

const SVG_NS = "http://www.w3.org/2000/svg";
const TITLE_SIZE = 16;
const SUBTITLE_SIZE = 12;
const TEXT_SIZE = 11;
const SWATCH = 12;

/** Escapes text for an XML text node or attribute. */
export function escapeXml(text: string): string {
  return text.replace(/&/g, "&amp;").replace(/</g, "&lt;").replace(/>/g, "&gt;").replace(
    /"/g,
    "&quot;",
  );
}

function numberAttr(el: Element, name: string, fallback: number): number {
  const value = Number.parseFloat(el.getAttribute(name) ?? "");
  return Number.isFinite(value) ? value : fallback;
}

function withNamespace(svg: Element): string {
  const html = svg.outerHTML;
  if (/^<svg[^>]*\sxmlns=/.test(html)) return html;
  return html.replace(/^<svg/, `<svg xmlns="${SVG_NS}"`);
}

/** One horizontal band of the composed SVG. */
interface Band {
  height: number;
  width: number;
  body: (y: number) => string;
}

function textBand(text: string, size: number, weight: string): Band {
  const height = Math.round(size * 1.6);
  return {
    height,
    width: Math.ceil(text.length * size * 0.6),
    body: (y) =>
      `<text x="0" y="${y + size}" font-size="${size}" font-weight="${weight}" ` +
      `font-family="DejaVu Sans, sans-serif" fill="black">${escapeXml(text)}</text>`,
  };
}

function swatchBand(container: Element): Band {
  const parts: string[] = [];
  let x = 0;
  for (const swatch of Array.from(container.children)) {
    if (swatch.tagName.toLowerCase() !== "span") continue;
    const icon = swatch.querySelector("svg");
    const fill = icon?.getAttribute("fill") ??
      icon?.querySelector("[fill]")?.getAttribute("fill") ??
      "currentColor";
    const label = (swatch.textContent ?? "").trim();
    parts.push(
      `<rect x="${x}" y="{Y}" width="${SWATCH}" height="${SWATCH}" fill="${escapeXml(fill)}"/>` +
        `<text x="${x + SWATCH + 4}" y="{YT}" font-size="${TEXT_SIZE}" ` +
        `font-family="DejaVu Sans, sans-serif" fill="black">${escapeXml(label)}</text>`,
    );
    x += SWATCH + 4 + Math.ceil(label.length * TEXT_SIZE * 0.6) + 14;
  }
  const height = SWATCH + 8;
  return {
    height,
    width: x,
    body: (y) =>
      parts.join("").replaceAll("{Y}", String(y + 2)).replaceAll(
        "{YT}",
        String(y + 2 + SWATCH - 2),
      ),
  };
}

function svgBand(svg: Element): Band {
  const width = numberAttr(svg, "width", 640);
  const height = numberAttr(svg, "height", 400);
  return {
    width,
    height: height + 4,
    body: (y) => {
      const inner = withNamespace(svg).replace(/^<svg/, `<svg x="0" y="${y}"`);
      return inner;
    },
  };
}

/**
 * Serializes a Plot result as a standalone SVG string with the SVG namespace declared.
 *
 * A bare `<svg>` is returned as is (plus `xmlns`). A `<figure>` (Plot adds one for a title,
 * subtitle, caption or swatch legend) is flattened into a single `<svg>`: text for the headings
 * and caption, coloured squares for swatches, and the plot's own `<svg>` elements nested below.
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * import * as Plot from "@observablehq/plot";
 * import { plotDocument } from "./document.ts";
 * import { toSvgString } from "./svg.ts";
 * const el = Plot.plot({ document: plotDocument(), title: "t", marks: [Plot.dot([[1, 2]])] });
 * assert.equal(toSvgString(el).startsWith('<svg xmlns="http://www.w3.org/2000/svg"'), true);
 * ```
 */
export function toSvgString(el: Element): string {
  const tag = el.tagName.toLowerCase();
  if (tag === "svg") return withNamespace(el);
  const bands: Band[] = [];
  for (const child of Array.from(el.children)) {
    const name = child.tagName.toLowerCase();
    if (name === "h2") bands.push(textBand(child.textContent ?? "", TITLE_SIZE, "bold"));
    else if (name === "h3") bands.push(textBand(child.textContent ?? "", SUBTITLE_SIZE, "normal"));
    else if (name === "figcaption") {
      bands.push(textBand(child.textContent ?? "", TEXT_SIZE, "normal"));
    } else if (name === "svg") bands.push(svgBand(child));
    else if (name === "div" && child.querySelector("span svg")) bands.push(swatchBand(child));
    else if (name === "div") {
      for (const svg of Array.from(child.querySelectorAll("svg"))) bands.push(svgBand(svg));
    }
  }
  if (bands.length === 0) throw new Error(`cannot export <${tag}>: it holds no <svg> to draw`);
  const width = Math.max(...bands.map((band) => band.width));
  let y = 0;
  const body: string[] = [];
  for (const band of bands) {
    body.push(band.body(y));
    y += band.height;
  }
  return `<svg xmlns="${SVG_NS}" width="${width}" height="${y}" viewBox="0 0 ${width} ${y}">` +
    `<rect width="100%" height="100%" fill="white"/>${body.join("")}</svg>`;
}
