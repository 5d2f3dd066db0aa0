/**
 * What makes a committed notebook "current", and the checks `deno task notebooks` runs.
 *
 * A notebook's outputs come from two kinds of computation: results it reads from
 * `experiments/results/` (each with its provenance and canary, `experiments/results_status.ts`)
 * and what its cells compute live from reins' code. `deno task notebooks --write` stamps into
 * `metadata.reins`: the SHA-256 of the cell sources, the code fingerprint of what the cells import
 * (the rule of `experiments/provenance.ts`: the numerics scope of the module graph, each file by
 * the SHA-256 of its code, the npm packages they import), the commit and the runtime.
 *
 * `--check` (`notebooks:check`, which executes nothing) **fails** only on what a rerun cannot
 * fix or what shows the numbers moved: no stamp, cell sources edited since the outputs were
 * written, a figure cell without its image, or a result set the notebook reads
 * (`metadata.reins_results`) whose canary differs. That the imported code changed is a **note**,
 * not a failure: `deno task notebooks` (CI runs it after the check) re-executes every notebook
 * (its cells assert their claims) and compares its text outputs with the committed ones
 * ({@link outputDrift}), printing the lines the rerun prints that the committed outputs lack as
 * a note. Not a failure: the Deno kernel can drop a printed line in headless runs, in the
 * committed run as well as the rerun. Cells tagged `measured` (timings) are not compared.
 *
 * @module
 */
import { createHash } from "node:crypto";
import { dirname, relative, resolve } from "node:path";
import {
  codeFingerprint as experimentFingerprint,
  gitState,
  runtimeInfo,
} from "../experiments/provenance.ts";

/** The repository root, without a trailing slash. */
export const ROOT = decodeURIComponent(new URL("../", import.meta.url).pathname).replace(/\/$/, "");

/** A notebook as nbformat 4 JSON (only what is read here). */
export interface Notebook {
  cells: NotebookCell[];
  metadata: Record<string, unknown> & { reins?: NotebookStamp } & NotebookMetadata;
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
  /** The commit the outputs were written on (absent in stamps written before it was kept). */
  commit?: string | null;
  /** The runtime they were computed on (see `experiments/provenance.ts`). */
  runtime?: Record<string, unknown>;
}

/** The notebook-level metadata this module reads besides the stamp. */
export interface NotebookMetadata {
  /** Result sets (folder names under `experiments/results/`) the notebook reads. */
  reins_results?: string[];
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
    commit: (await gitState(ROOT)).commit,
    runtime: { ...(await runtimeInfo(ROOT)) },
  };
}

/** The state of a result set a notebook reads, as `experiments/results_status.ts` gives it. */
export interface ReadResultState {
  state: "current" | "confirmed" | "stale";
  canary_failed: boolean;
  reason: string;
}

/** What `--check` found for one notebook. */
export interface NotebookCheck {
  /** Reasons the check fails (empty: it passes). */
  failures: string[];
  /** What the reader should know but does not fail the check. */
  notes: string[];
}

/**
 * Checks a committed notebook (see the module doc): failures and notes. `fingerprint` computes
 * the code fingerprint of the notebook's imports, `results` the state of a result set it reads
 * (both replaceable in tests).
 */
export async function checkNotebook(
  nb: Notebook,
  notebookPath: string,
  fingerprint: (entries: readonly string[]) => Promise<CodeFingerprint> = codeFingerprint,
  results: (name: string) => Promise<ReadResultState> = defaultResultState,
): Promise<NotebookCheck> {
  const failures: string[] = [];
  const notes: string[] = [];
  const stamp = nb.metadata.reins;
  if (!stamp) {
    failures.push("no outputs stamp (run `deno task notebooks --write <name>`)");
  } else {
    if (stamp.sources_sha256 !== sourcesHash(nb)) {
      failures.push("cell sources changed since the outputs were written");
    }
    const now = await fingerprint(notebookImports(nb, notebookPath));
    if (now.hash !== stamp.code.hash) {
      const changed = [...new Set([...Object.keys(now.files), ...Object.keys(stamp.code.files)])]
        .filter((f) => now.files[f] !== stamp.code.files[f]);
      const npm = now.npm.join() !== stamp.code.npm.join() ? ["npm packages"] : [];
      const named = [...changed, ...npm];
      notes.push(
        `code changed since the outputs were written: ${named.slice(0, 8).join(", ")}${
          named.length > 8 ? ` and ${named.length - 8} more` : ""
        } (\`deno task notebooks\` reruns it and compares its outputs)`,
      );
    }
  }
  for (const name of nb.metadata.reins_results ?? []) {
    const r = await results(name);
    if (r.canary_failed) failures.push(`results ${name}: ${r.reason}`);
    else if (r.state === "stale") notes.push(`results ${name} shown as stale: ${r.reason}`);
    else if (r.state === "confirmed") notes.push(`results ${name} confirmed: ${r.reason}`);
  }
  const missing = missingFigures(nb);
  if (missing.length) failures.push(`figure cell(s) ${missing.join(", ")} without an image`);
  return { failures, notes };
}

async function defaultResultState(name: string): Promise<ReadResultState> {
  const { resultStatus } = await import("../experiments/results_status.ts");
  return await resultStatus(`${ROOT}/experiments/results/${name}`);
}

/**
 * Why a committed notebook fails the check (empty: it passes): {@link checkNotebook}'s
 * failures.
 */
export async function staleReasons(
  nb: Notebook,
  notebookPath: string,
  fingerprint: (entries: readonly string[]) => Promise<CodeFingerprint> = codeFingerprint,
  results?: (name: string) => Promise<ReadResultState>,
): Promise<string[]> {
  return (await checkNotebook(nb, notebookPath, fingerprint, results)).failures;
}

function textLines(cell: NotebookCell): string[] {
  const out: string[] = [];
  for (const o of cell.outputs ?? []) {
    const text = (o as { text?: string | string[] }).text;
    if (text !== undefined) out.push(Array.isArray(text) ? text.join("") : text);
    const plain = o.data?.["text/plain"];
    if (plain !== undefined) out.push(Array.isArray(plain) ? plain.join("") : String(plain));
  }
  // deno-lint-ignore no-control-regex
  return out.join("\n").replace(/\x1b\[[0-9;]*m/g, "").split("\n").map((l) => l.trimEnd())
    .filter((l) => l !== "");
}

/** A line a rerun printed that the committed outputs of its cell lack. */
export interface OutputDrift {
  cell: number;
  line: string;
}

/**
 * Lines the executed notebook printed that the committed one's same cell lacks (code cells
 * not tagged `measured`, in a notebook whose sources are unchanged): the numbers moved.
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * import { outputDrift } from "./notebook_meta.ts";
 * const cell = (text: string, tags: string[] = []) => ({
 *   cell_type: "code", source: "x", metadata: { tags },
 *   outputs: [{ output_type: "stream", text }],
 * });
 * const committed = { metadata: {}, cells: [cell("a = 1\nb = 2\n"), cell("t 3 s", ["measured"])] };
 * const same = { metadata: {}, cells: [cell("a = 1\n"), cell("t 9 s", ["measured"])] };
 * assert.deepEqual(outputDrift(committed, same), []); // a dropped line is no drift
 * const moved = { metadata: {}, cells: [cell("a = 1.5\nb = 2\n"), cell("t 3 s")] };
 * assert.deepEqual(outputDrift(committed, moved), [{ cell: 0, line: "a = 1.5" }]);
 * ```
 */
export function outputDrift(committed: Notebook, executed: Notebook): OutputDrift[] {
  const out: OutputDrift[] = [];
  committed.cells.forEach((c, i) => {
    const e = executed.cells[i];
    if (!e || c.cell_type !== "code" || e.cell_type !== "code") return;
    if (c.metadata?.tags?.includes("measured")) return;
    const before = new Set(textLines(c));
    for (const line of textLines(e)) if (!before.has(line)) out.push({ cell: i, line });
  });
  return out;
}

/** Reads a notebook file. */
export async function readNotebook(path: string): Promise<Notebook> {
  return JSON.parse(await Deno.readTextFile(path)) as Notebook;
}

/** Writes a notebook as Jupyter does (one-space indent, trailing newline). */
export async function writeNotebook(path: string, nb: Notebook): Promise<void> {
  await Deno.writeTextFile(path, JSON.stringify(nb, null, 1) + "\n");
}
