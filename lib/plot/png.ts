/**
 * SVG → PNG with resvg, using a font file that exists on the machine (resvg draws no text
 * without one, and we never let it scan system fonts: that is slow and machine-dependent).
 *
 * resvg is a native addon; it is loaded on first use, so importing reins does not load it.
 *
 * @module
 */

/** Where Debian's `fonts-dejavu-core` puts its fonts; the default font directory. */
export const DEFAULT_FONT_DIR = "/usr/share/fonts/truetype/dejavu";

/** Options for {@link svgToPng}. */
export interface PngOptions {
  /** Font files to load; default: `$REINS_FONT` or DejaVu Sans (regular, bold, mono) from {@link DEFAULT_FONT_DIR}. */
  fontFiles?: string[];
  /** Output width in pixels (height keeps the aspect ratio); default: the SVG's own width. */
  width?: number;
  /** Background colour; default white (plots are drawn on a transparent canvas). */
  background?: string;
}

function exists(path: string): boolean {
  try {
    return Deno.statSync(path).isFile;
  } catch {
    return false;
  }
}

/**
 * The font files PNG export loads: `$REINS_FONT` (a `:`-separated list) when set, else DejaVu.
 * Throws a clear error naming the missing files, since a PNG without text is worse than none.
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * import { defaultFontFiles } from "./png.ts";
 * assert.equal(defaultFontFiles()[0], "/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf");
 * ```
 */
export function defaultFontFiles(): string[] {
  const env = Deno.env.get("REINS_FONT");
  const candidates = env ? env.split(":").filter(Boolean) : [
    `${DEFAULT_FONT_DIR}/DejaVuSans.ttf`,
    `${DEFAULT_FONT_DIR}/DejaVuSans-Bold.ttf`,
    `${DEFAULT_FONT_DIR}/DejaVuSansMono.ttf`,
  ];
  const found = candidates.filter(exists);
  if (found.length === 0) {
    throw new Error(
      `no font file for PNG export: tried ${candidates.join(", ")} ` +
        `(install Debian fonts-dejavu-core or set REINS_FONT to a .ttf path)`,
    );
  }
  return found;
}

/**
 * Renders an SVG string to PNG bytes.
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * import { svgToPng } from "./png.ts";
 * const png = await svgToPng('<svg xmlns="http://www.w3.org/2000/svg" width="4" height="4"/>');
 * assert.equal(png[1], 0x50); // "P" of the PNG signature
 * ```
 */
export async function svgToPng(svg: string, options: PngOptions = {}): Promise<Uint8Array> {
  const fontFiles = options.fontFiles ?? defaultFontFiles();
  const missing = fontFiles.filter((file) => !exists(file));
  if (missing.length > 0) throw new Error(`fontFiles: not found: ${missing.join(", ")}`);
  const { Resvg } = await import("@resvg/resvg-js");
  const resvg = new Resvg(svg, {
    background: options.background ?? "white",
    fitTo: options.width ? { mode: "width", value: options.width } : { mode: "original" },
    font: {
      loadSystemFonts: false,
      fontFiles,
      defaultFontFamily: "DejaVu Sans",
      sansSerifFamily: "DejaVu Sans",
      monospaceFamily: "DejaVu Sans Mono",
    },
    logLevel: "off",
  });
  return new Uint8Array(resvg.render().asPng());
}
