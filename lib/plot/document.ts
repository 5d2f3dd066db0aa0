/**
 * A server-side DOM for Observable Plot: notebooks and scripts have no browser `document`.
 *
 * @module
 */
import { parseHTML } from "linkedom";

let shared: Document | undefined;

/**
 * The shared linkedom document figures are drawn into. Created on first use.
 *
 * Pass it as Plot's `document` option; never shadow it with a cell variable named `document`,
 * since Deno's Jupyter kernel keeps every cell in one global scope.
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * import * as Plot from "@observablehq/plot";
 * import { plotDocument } from "./document.ts";
 * const svg = Plot.plot({ document: plotDocument(), marks: [Plot.dot([[1, 2]])] });
 * assert.equal(svg.localName, "svg");
 * ```
 */
export function plotDocument(): Document {
  if (!shared) {
    const { document } = parseHTML("<!DOCTYPE html><html><head></head><body></body></html>");
    shared = document as unknown as Document;
  }
  return shared;
}
