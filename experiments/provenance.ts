/**
 * Provenance of committed results: which code produced them, so that a notebook can refuse
 * results the current checkout would not reproduce.
 *
 * The rule: a result's **code fingerprint** is the SHA-256 of
 *
 * - every local module in the static module graph of the experiment's entry points, as
 *   `deno info --json <entry>` reports it (the entry script, and any other script the
 *   experiment runs as a process, such as the built-in harness), each by its path relative to
 *   the repository root and the SHA-256 of its **code** ({@link codeText}: the file without its
 *   whole-line comments, doc blocks and blank lines, so that a doc or comment edit does not
 *   retire results that the same code would reproduce);
 * - the npm packages those modules import, by resolved `name@version` (their own dependencies
 *   are pinned by `deno.lock` through them);
 * - the non-TypeScript files the experiment runs, by glob (the Python worker's `*.py`).
 *
 * Nothing else: an edit elsewhere in the repository (docs, another area's module the
 * experiment never imports, a notebook, `deno.json` tasks) or a comment leaves the fingerprint
 * unchanged, and any edit to the code of a file the experiment imports or runs changes it.
 * (The comment rule is line-based: a template literal line that starts with `//`, `#` or `/*`
 * would be taken for a comment. The project has none in experiment code; the trade is stated
 * here because it errs toward calling a result current.) The Deno version is
 * recorded beside the fingerprint but is not part of it.
 *
 * | file                            | what it holds                                           |
 * | ------------------------------- | ------------------------------------------------------- |
 * | `<results>/<name>/provenance.json` | the config, the fingerprint (hash + per-file hashes), the command |
 *
 * @module
 */
import { z } from "zod";
import { parseOrThrow } from "../lib/schema.ts";

/** The repository root (where `deno.json` lives), without a trailing slash. */
export const REPO_ROOT: string = decodeURIComponent(new URL("../", import.meta.url).pathname)
  .replace(/\/$/, "");

/** What an experiment's code is: entry points (TypeScript) and extra files it runs (globs). */
export const CodeSpecSchema = z.object({
  /** Entry points, relative to the repository root (their module graphs are hashed). */
  entries: z.array(z.string().min(1)).min(1),
  /**
   * Other files the experiment runs, relative to the root: plain paths or `dir/*.ext`
   * (one level, no recursion) — e.g. `lib/trainer/worker/reins_worker/*.py`.
   */
  extra: z.array(z.string().min(1)).default([]),
});
/** What an experiment's code is. */
export type CodeSpec = z.infer<typeof CodeSpecSchema>;
/** What an experiment's code is, as a caller writes it. */
export type CodeSpecInput = z.input<typeof CodeSpecSchema>;

/** The fingerprint of an experiment's code. */
export const CodeFingerprintSchema = z.object({
  /** SHA-256 (hex) over `files` and `npm`. */
  hash: z.string().regex(/^[0-9a-f]{64}$/),
  /** SHA-256 (hex) of each hashed file, by path relative to the repository root. */
  files: z.record(z.string(), z.string()),
  /** npm packages the graph imports, `name@version`, sorted. */
  npm: z.array(z.string()),
  spec: CodeSpecSchema,
});
/** The fingerprint of an experiment's code. */
export type CodeFingerprint = z.infer<typeof CodeFingerprintSchema>;

/** `provenance.json`: what produced a results folder. */
export const ProvenanceSchema = z.object({
  /** The command that (re)produces the results. */
  command: z.string(),
  /** The experiment's full configuration. */
  config: z.json(),
  code: CodeFingerprintSchema,
  deno: z.string(),
  created_at: z.string(),
});
/** `provenance.json`: what produced a results folder. */
export type Provenance = z.infer<typeof ProvenanceSchema>;

async function sha256Hex(data: Uint8Array | string): Promise<string> {
  const bytes = typeof data === "string" ? new TextEncoder().encode(data) : data;
  const digest = await crypto.subtle.digest("SHA-256", bytes as Uint8Array<ArrayBuffer>);
  return [...new Uint8Array(digest)].map((b) => b.toString(16).padStart(2, "0")).join("");
}

/**
 * The part of a source file that runs: lines that are whole-line comments (`//` and block
 * comments starting a line in TypeScript, `#` in Python), blank lines and trailing whitespace
 * are dropped; TypeScript lines are also trimmed (indentation carries no meaning there, unlike
 * Python's).
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * import { codeText } from "./provenance.ts";
 * const a = "/**\n * Doc.\n *\/\nexport const x = 1; // one\n\n// why\nconst y = \"//\";\n";
 * const b = "/** Other doc. *\/\n  export const x = 1; // one\nconst y = \"//\";\n";
 * assert.equal(codeText("a.ts", a), codeText("a.ts", b));
 * assert.equal(codeText("a.ts", a), 'export const x = 1; // one\nconst y = "//";');
 * assert.notEqual(codeText("a.ts", a), codeText("a.ts", a.replace("= 1", "= 2")));
 * assert.equal(codeText("w.py", "# note\ndef f():\n    return 1\n"), "def f():\n    return 1");
 * ```
 */
export function codeText(path: string, source: string): string {
  const python = path.endsWith(".py");
  const kept: string[] = [];
  let inBlock = false;
  for (const raw of source.split("\n")) {
    const line = raw.trimEnd();
    const t = line.trim();
    if (python) {
      if (t !== "" && !t.startsWith("#")) kept.push(line);
      continue;
    }
    if (inBlock) {
      const end = t.indexOf("*/");
      if (end < 0) continue;
      inBlock = false;
      const rest = t.slice(end + 2).trim();
      if (rest) kept.push(rest);
      continue;
    }
    if (t.startsWith("/*")) {
      const end = t.indexOf("*/", 2);
      if (end < 0) inBlock = true;
      else if (t.slice(end + 2).trim()) kept.push(t.slice(end + 2).trim());
      continue;
    }
    if (t !== "" && !t.startsWith("//")) kept.push(t);
  }
  return kept.join("\n");
}

interface DenoInfo {
  modules: { kind?: string; specifier: string; npmPackage?: string; error?: string }[];
}

/** The local files and npm packages of an entry point's static module graph. */
async function moduleGraph(
  entry: string,
  root: string,
): Promise<{ files: string[]; npm: string[] }> {
  const out = await new Deno.Command(Deno.execPath(), {
    args: ["info", "--json", `${root}/${entry}`],
    cwd: root,
    stdout: "piped",
    stderr: "piped",
  }).output();
  if (!out.success) {
    throw new Error(
      `deno info --json ${entry} failed: ${new TextDecoder().decode(out.stderr).slice(-800)}`,
    );
  }
  const info = JSON.parse(new TextDecoder().decode(out.stdout)) as DenoInfo;
  const files: string[] = [];
  const npm: string[] = [];
  for (const m of info.modules) {
    if (m.error) throw new Error(`deno info ${entry}: ${m.specifier}: ${m.error}`);
    if (m.kind === "npm" && m.npmPackage) npm.push(m.npmPackage);
    else if (m.specifier.startsWith("file://")) {
      const path = decodeURIComponent(new URL(m.specifier).pathname);
      if (!path.startsWith(`${root}/`)) {
        throw new Error(`${entry} imports ${path}, outside the repository ${root}`);
      }
      files.push(path.slice(root.length + 1));
    }
  }
  return { files, npm };
}

async function expandExtra(pattern: string, root: string): Promise<string[]> {
  const star = pattern.lastIndexOf("/*");
  if (star < 0) return [pattern];
  const dir = pattern.slice(0, star);
  const suffix = pattern.slice(star + 2);
  const out: string[] = [];
  for await (const entry of Deno.readDir(`${root}/${dir}`)) {
    if (entry.isFile && entry.name.endsWith(suffix)) out.push(`${dir}/${entry.name}`);
  }
  if (out.length === 0) throw new Error(`code.extra: ${pattern} matches no file`);
  return out;
}

/**
 * Fingerprints the code of an experiment (see the module doc for the rule).
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * import { codeFingerprint } from "./provenance.ts";
 * const fp = await codeFingerprint({ entries: ["experiments/power.ts"] });
 * assert.ok("experiments/power.ts" in fp.files);
 * assert.ok(!("lib/loop/run.ts" in fp.files)); // not imported, not hashed
 * ```
 */
export async function codeFingerprint(
  input: CodeSpecInput,
  root: string = REPO_ROOT,
): Promise<CodeFingerprint> {
  const spec = parseOrThrow(CodeSpecSchema, input, "code");
  const paths = new Set<string>();
  const npm = new Set<string>();
  for (const entry of spec.entries) {
    const graph = await moduleGraph(entry, root);
    graph.files.forEach((f) => paths.add(f));
    graph.npm.forEach((p) => npm.add(p));
  }
  for (const pattern of spec.extra) {
    for (const f of await expandExtra(pattern, root)) paths.add(f);
  }
  const files: Record<string, string> = {};
  for (const path of [...paths].sort()) {
    files[path] = await sha256Hex(codeText(path, await Deno.readTextFile(`${root}/${path}`)));
  }
  const npmList = [...npm].sort();
  const lines = [
    ...Object.entries(files).map(([p, h]) => `file ${p} ${h}`),
    ...npmList.map((p) => `npm ${p}`),
  ];
  return { hash: await sha256Hex(lines.join("\n")), files, npm: npmList, spec };
}

/** How two fingerprints differ. */
export interface FingerprintDiff {
  changed: string[];
  added: string[];
  removed: string[];
  npm_added: string[];
  npm_removed: string[];
}

/**
 * The files and packages that differ between a stored fingerprint and the current one.
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * import { diffFingerprints } from "./provenance.ts";
 * const spec = { entries: ["x.ts"], extra: [] };
 * const a = { hash: "0".repeat(64), files: { "x.ts": "1", "y.ts": "2" }, npm: [], spec };
 * const b = { hash: "1".repeat(64), files: { "x.ts": "9", "z.ts": "3" }, npm: [], spec };
 * assert.deepEqual(diffFingerprints(a, b).changed, ["x.ts"]);
 * assert.deepEqual(diffFingerprints(a, b).removed, ["y.ts"]);
 * ```
 */
export function diffFingerprints(
  stored: CodeFingerprint,
  current: CodeFingerprint,
): FingerprintDiff {
  const changed: string[] = [];
  const added: string[] = [];
  const removed: string[] = [];
  for (const [path, hash] of Object.entries(current.files)) {
    if (!(path in stored.files)) added.push(path);
    else if (stored.files[path] !== hash) changed.push(path);
  }
  for (const path of Object.keys(stored.files)) if (!(path in current.files)) removed.push(path);
  const before = new Set(stored.npm);
  const after = new Set(current.npm);
  return {
    changed: changed.sort(),
    added: added.sort(),
    removed: removed.sort(),
    npm_added: current.npm.filter((p) => !before.has(p)),
    npm_removed: stored.npm.filter((p) => !after.has(p)),
  };
}

/** Results that the current code did not produce (or that carry no provenance). */
export class StaleResultsError extends Error {
  readonly dir: string;
  readonly diff: FingerprintDiff | null;
  constructor(dir: string, message: string, diff: FingerprintDiff | null) {
    super(message);
    this.name = "StaleResultsError";
    this.dir = dir;
    this.diff = diff;
  }
}

/** The path of a results folder's provenance manifest. */
export function provenancePath(dir: string): string {
  return `${dir}/provenance.json`;
}

/**
 * Writes `provenance.json` into a results folder: the command, the config and the code
 * fingerprint. Pass the fingerprint taken when the experiment started: it is checked against
 * the checkout again now, and an edit made while the experiment ran throws
 * {@link StaleResultsError} (naming the files) instead of recording code that did not run.
 *
 * @example
 * ```ts ignore
 * const code = await codeFingerprint(MECHANISM_CODE); // before running
 * // … run …
 * await writeProvenance("experiments/results/mechanism_quick", {
 *   command: "deno task ablation:mechanism --quick", config, code,
 * });
 * ```
 */
export async function writeProvenance(
  dir: string,
  input: { command: string; config: unknown; code: CodeSpecInput | CodeFingerprint },
  root: string = REPO_ROOT,
): Promise<Provenance> {
  let code: CodeFingerprint;
  if ("hash" in input.code) {
    code = input.code;
    const now = await codeFingerprint(code.spec, root);
    if (now.hash !== code.hash) {
      throw new StaleResultsError(
        dir,
        `the code changed while the experiment ran (${
          describe(diffFingerprints(code, now))
        }); not recording results under ${relative(dir)} — rerun \`${input.command}\``,
        diffFingerprints(code, now),
      );
    }
  } else code = await codeFingerprint(input.code, root);
  const provenance: Provenance = {
    command: input.command,
    config: JSON.parse(JSON.stringify(input.config ?? null)),
    code,
    deno: Deno.version.deno,
    created_at: new Date().toISOString(),
  };
  await Deno.mkdir(dir, { recursive: true });
  await Deno.writeTextFile(provenancePath(dir), JSON.stringify(provenance, null, 2) + "\n");
  return provenance;
}

/** Reads a folder's `provenance.json` (null when there is none). */
export async function readProvenance(dir: string): Promise<Provenance | null> {
  let text: string;
  try {
    text = await Deno.readTextFile(provenancePath(dir));
  } catch (error) {
    if (error instanceof Deno.errors.NotFound) return null;
    throw error;
  }
  return parseOrThrow(ProvenanceSchema, JSON.parse(text), provenancePath(dir));
}

function relative(dir: string): string {
  return dir.startsWith(`${REPO_ROOT}/`) ? dir.slice(REPO_ROOT.length + 1) : dir;
}

function describe(diff: FingerprintDiff): string {
  const parts: string[] = [];
  if (diff.changed.length) parts.push(`changed: ${diff.changed.join(", ")}`);
  if (diff.added.length) parts.push(`now imported: ${diff.added.join(", ")}`);
  if (diff.removed.length) parts.push(`no longer imported: ${diff.removed.join(", ")}`);
  if (diff.npm_added.length || diff.npm_removed.length) {
    parts.push(
      `npm packages: +[${diff.npm_added.join(", ")}] -[${diff.npm_removed.join(", ")}]`,
    );
  }
  return parts.join("; ");
}

/**
 * Checks that a results folder was produced by the current code: its `provenance.json` exists
 * and its fingerprint equals the checkout's (same rule, same spec). Throws
 * {@link StaleResultsError} naming every file that changed and the command to rerun; returns
 * the provenance when they match.
 *
 * @example
 * ```ts ignore
 * const provenance = await verifyProvenance("experiments/results/mechanism_quick");
 * provenance.code.hash; // the hash the results were produced by, = the checkout's
 * ```
 */
export async function verifyProvenance(dir: string, root: string = REPO_ROOT): Promise<Provenance> {
  const stored = await readProvenance(dir);
  if (!stored) {
    throw new StaleResultsError(
      dir,
      `${relative(dir)} has no provenance.json: nothing says which code produced these ` +
        `results, so they are not plotted; rerun the experiment that writes them`,
      null,
    );
  }
  const current = await codeFingerprint(stored.code.spec, root);
  if (current.hash === stored.code.hash) return stored;
  const diff = diffFingerprints(stored.code, current);
  throw new StaleResultsError(
    dir,
    `${relative(dir)} was produced by other code than this checkout ` +
      `(code hash ${stored.code.hash.slice(0, 12)} → ${current.hash.slice(0, 12)}; ` +
      `${describe(diff)}); refusing to plot stale results — rerun \`${stored.command}\``,
    diff,
  );
}
