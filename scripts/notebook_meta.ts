/**
 * What makes a committed notebook "current", and the checks `deno task notebooks` runs.
 *
 * Outputs of some notebooks are measured (timings, training curves), so a rerun does not
 * reproduce them byte for byte. A committed notebook is current when (1) its cell sources are
 * the ones its outputs were computed from, and (2) the code those cells import is unchanged.
 * `deno task notebooks --write` stamps both into the notebook's metadata (`metadata.reins`):
 * the SHA-256 of the cell sources, and the code fingerprint of the local modules the cells
 * import (their whole static module graph, each file by its path and SHA-256, plus the npm
 * packages by `name@version`: `codeFingerprint` of `experiments/provenance.ts`). `--check` recomputes both and
 * names what changed. A figure cell (one that saves or displays a figure) must hold an image.
 *
 * @module
 */
import { createHash } from "node:crypto";
import { dirname, relative, resolve } from "node:path";
import { codeFingerprint as experimentFingerprint } from "../experiments/provenance.ts";

/** The repository root, without a trailing slash. */
export const ROOT = decodeURIComponent(new URL("../", import.meta.url).pathname).replace(/\/$/, "");

/** A notebook as nbformat 4 JSON (only what is read here). */
export interface Notebook {
  cells: NotebookCell[];
  metadata: Record<string, unknown> & { reins?: NotebookStamp };
  [key: string]: unknown;
}

/** One cell. */
export interface NotebookCell {
  cell_type: string;
  source: string | string[];
  metadata?: { tags?: string[] } & Record<string, unknown>;
  outputs?: { output_type: string; data?: Record<string, unknown> }[];
  [key: string]: unknown;
}

/** The code a notebook's outputs were computed with. */
export interface CodeFingerprint {
  /** SHA-256 over `files` and `npm`. */
  hash: string;
  /** Local module path (relative to the root) → SHA-256 of its bytes. */
  files: Record<string, string>;
  /** npm packages of the module graph (`name@version`). */
  npm: string[];
}

/** `metadata.reins` of a written notebook. */
export interface NotebookStamp {
  sources_sha256: string;
  code: CodeFingerprint;
  written_by: string;
}

function sha256(text: string | Uint8Array): string {
  return createHash("sha256").update(text).digest("hex");
}

function sourceOf(cell: NotebookCell): string {
  return Array.isArray(cell.source) ? cell.source.join("") : cell.source;
}

/**
 * SHA-256 of the notebook's cell types and sources (outputs and metadata left out).
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * import { sourcesHash } from "./notebook_meta.ts";
 * const nb = { metadata: {}, cells: [{ cell_type: "code", source: ["1 +", " 1"], outputs: [] }] };
 * const same = { metadata: { x: 1 }, cells: [{ cell_type: "code", source: "1 + 1" }] };
 * assert.equal(sourcesHash(nb), sourcesHash(same));
 * ```
 */
export function sourcesHash(nb: Notebook): string {
  return sha256(JSON.stringify(nb.cells.map((c) => [c.cell_type, sourceOf(c)])));
}

const FIGURE = /saveFigure\(|\.display\(\)|await show\(|^(await )?plot\(/m;

/**
 * Indices of figure cells: code cells that save or display a figure (or are tagged `figure`).
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * import { figureCells, missingFigures } from "./notebook_meta.ts";
 * const nb = {
 *   metadata: {},
 *   cells: [
 *     { cell_type: "code", source: "1", outputs: [] },
 *     { cell_type: "code", source: "await fig.display();", outputs: [] },
 *     {
 *       cell_type: "code",
 *       source: 'await saveFigure(f, "f");',
 *       outputs: [{ output_type: "display_data", data: { "image/svg+xml": "<svg/>" } }],
 *     },
 *   ],
 * };
 * assert.deepEqual(figureCells(nb), [1, 2]);
 * assert.deepEqual(missingFigures(nb), [1]);
 * ```
 */
export function figureCells(nb: Notebook): number[] {
  const out: number[] = [];
  nb.cells.forEach((c, i) => {
    if (c.cell_type !== "code") return;
    if (c.metadata?.tags?.includes("figure") || FIGURE.test(sourceOf(c))) out.push(i);
  });
  return out;
}

/** Figure cells without an image (SVG or PNG) among their outputs. */
export function missingFigures(nb: Notebook): number[] {
  return figureCells(nb).filter((i) =>
    !(nb.cells[i].outputs ?? []).some((o) =>
      o.data !== undefined && ("image/svg+xml" in o.data || "image/png" in o.data)
    )
  );
}

/** Local modules the notebook's cells import (`../lib/x.ts`, `../mod.ts`), as absolute paths. */
export function notebookImports(nb: Notebook, notebookPath: string): string[] {
  const dir = dirname(resolve(notebookPath));
  const found = new Set<string>();
  const pattern = /(?:from|import)\s*\(?\s*["'](\.{1,2}\/[^"']+)["']/g;
  for (const cell of nb.cells) {
    if (cell.cell_type !== "code") continue;
    for (const m of sourceOf(cell).matchAll(pattern)) found.add(resolve(dir, m[1]));
  }
  return [...found].sort();
}

/**
 * The fingerprint of the module graphs of `entries` (absolute paths): every local file in them
 * by path and SHA-256, and the npm packages they resolve to — the rule of the experiments'
 * provenance (`experiments/provenance.ts`), applied to the modules a notebook imports.
 */
export async function codeFingerprint(entries: readonly string[]): Promise<CodeFingerprint> {
  if (entries.length === 0) return { hash: sha256("no imports"), files: {}, npm: [] };
  const fp = await experimentFingerprint({ entries: entries.map((e) => relative(ROOT, e)) }, ROOT);
  return { hash: fp.hash, files: fp.files, npm: fp.npm };
}

/** The stamp `--write` puts into a freshly executed notebook. */
export async function stampFor(nb: Notebook, notebookPath: string): Promise<NotebookStamp> {
  return {
    sources_sha256: sourcesHash(nb),
    code: await codeFingerprint(notebookImports(nb, notebookPath)),
    written_by: "deno task notebooks --write",
  };
}

/**
 * Why a committed notebook is not current (empty: it is). `fingerprint` computes the code
 * fingerprint of the notebook's imports (replaceable, e.g. by experiments' provenance).
 */
export async function staleReasons(
  nb: Notebook,
  notebookPath: string,
  fingerprint: (entries: readonly string[]) => Promise<CodeFingerprint> = codeFingerprint,
): Promise<string[]> {
  const reasons: string[] = [];
  const stamp = nb.metadata.reins;
  if (!stamp) {
    reasons.push("no outputs stamp (run `deno task notebooks --write <name>`)");
  } else {
    if (stamp.sources_sha256 !== sourcesHash(nb)) {
      reasons.push("cell sources changed since the outputs were written");
    }
    const now = await fingerprint(notebookImports(nb, notebookPath));
    if (now.hash !== stamp.code.hash) {
      const changed = [...new Set([...Object.keys(now.files), ...Object.keys(stamp.code.files)])]
        .filter((f) => now.files[f] !== stamp.code.files[f]);
      const npm = now.npm.join() !== stamp.code.npm.join() ? ["npm packages"] : [];
      const named = [...changed, ...npm];
      reasons.push(
        `code changed since the outputs were written: ${named.slice(0, 8).join(", ")}${
          named.length > 8 ? ` and ${named.length - 8} more` : ""
        }`,
      );
    }
  }
  const missing = missingFigures(nb);
  if (missing.length) reasons.push(`figure cell(s) ${missing.join(", ")} without an image`);
  return reasons;
}

/** Reads a notebook file. */
export async function readNotebook(path: string): Promise<Notebook> {
  return JSON.parse(await Deno.readTextFile(path)) as Notebook;
}

/** Writes a notebook as Jupyter does (one-space indent, trailing newline). */
export async function writeNotebook(path: string, nb: Notebook): Promise<void> {
  await Deno.writeTextFile(path, JSON.stringify(nb, null, 1) + "\n");
}
