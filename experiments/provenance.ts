/**
 * Provenance of committed results: what computed them, so that a later checkout can tell
 * whether it still computes the same numbers.
 *
 * **The rule, in one sentence:** a result depends on the files of the _numerics scope_
 * ({@link NUMERICS_SCOPE}: `experiments/`, the pure core `lib/schema`, `lib/util`, `lib/tokens`,
 * `lib/samples`, `lib/algo`, `lib/batching`, and `lib/loop`, `lib/trainer` with the worker's
 * Python, `lib/engine`, the built-in harness and its environments) that its entry points reach
 * through their static imports, plus the data files it declares; the service layers (gateway,
 * proxy, controller, UI, monitors, HTTP, curation, plotting) move and show bytes, not numbers, so
 * an edit there does not retire a result — and the result's canary (`canary.ts`), a few-second
 * deterministic slice of the same computation, is what decides when the fingerprint moves, and
 * catches a numeric change that passes through a service layer anyway when it is rerun (CI reruns
 * every canary).
 *
 * Each file counts by the SHA-256 of its **code** ({@link codeText}: whole-line comments, doc
 * blocks and blank lines left out), each npm package that an in-scope module imports by
 * `name@version`, each data file by the SHA-256 of its bytes. Next to the fingerprint,
 * `provenance.json` records the commit, whether the tree was dirty (with the SHA-256 of the diff)
 * and the runtime (Deno, Python, torch, numpy, the BLAS torch loaded, threads, device): those are
 * not part of the fingerprint (a canary rerun on another runtime says whether they matter) but a
 * canary that differs is reported next to them.
 *
 * | file                                | what it holds                                                        |
 * | ----------------------------------- | -------------------------------------------------------------------- |
 * | `<results>/<name>/provenance.json`  | command, config, code fingerprint, data hashes, git state, runtime, confirmations |
 * | `<results>/<name>/canary.json`      | the canary's spec and its recorded outputs (`canary.ts`)             |
 *
 * @module
 */
import { z } from "zod";
import { parseOrThrow } from "../lib/schema.ts";

/** The repository root (where `deno.json` lives), without a trailing slash. */
export const REPO_ROOT: string = decodeURIComponent(new URL("../", import.meta.url).pathname)
  .replace(/\/$/, "");

/**
 * Path prefixes (relative to the root) of the files a result's numbers can depend on; a file of
 * the import graph outside them is left out of the fingerprint (see the module doc).
 */
export const NUMERICS_SCOPE: readonly string[] = [
  "experiments/",
  "lib/schema.ts",
  "lib/schema/",
  "lib/util/",
  "lib/tokens/",
  "lib/samples/",
  "lib/algo/",
  "lib/batching/",
  "lib/loop/",
  "lib/trainer/",
  "lib/engine/",
  "lib/harness/builtin/",
  "lib/harness/envs/",
];

/**
 * Whether a file (path relative to the root) is in the numerics scope.
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * import { inNumericsScope } from "./provenance.ts";
 * assert.ok(inNumericsScope("lib/algo/normalization.ts"));
 * assert.ok(!inNumericsScope("lib/controller/k8s_backend.ts"));
 * assert.ok(!inNumericsScope("lib/schemata.ts"));
 * ```
 */
export function inNumericsScope(path: string): boolean {
  return NUMERICS_SCOPE.some((p) => p.endsWith("/") ? path.startsWith(p) : path === p);
}

/** What an experiment's code is: entry points, extra files it runs, data files it reads. */
export const CodeSpecSchema = z.object({
  /** Entry points, relative to the repository root (their in-scope module graphs are hashed). */
  entries: z.array(z.string().min(1)).min(1),
  /**
   * Other files the experiment runs, relative to the root: plain paths or `dir/*.ext`
   * (one level, no recursion) — e.g. `lib/trainer/worker/reins_worker/*.py`.
   */
  extra: z.array(z.string().min(1)).default([]),
  /** Data files the experiment reads (same forms as `extra`), hashed by their bytes. */
  data: z.array(z.string().min(1)).default([]),
});
/** What an experiment's code is. */
export type CodeSpec = z.infer<typeof CodeSpecSchema>;
/** What an experiment's code is, as a caller writes it. */
export type CodeSpecInput = z.input<typeof CodeSpecSchema>;

/** The fingerprint of an experiment's code. */
export const CodeFingerprintSchema = z.object({
  /** SHA-256 (hex) over `files`, `npm` and `data`. */
  hash: z.string().regex(/^[0-9a-f]{64}$/),
  /** SHA-256 (hex) of each hashed file's code, by path relative to the repository root. */
  files: z.record(z.string(), z.string()),
  /** npm packages the in-scope modules import, `name@version`, sorted. */
  npm: z.array(z.string()),
  /** SHA-256 (hex) of each data file's bytes. */
  data: z.record(z.string(), z.string()).default({}),
  /** The rule that chose the files (`numerics-v1`: {@link NUMERICS_SCOPE}). */
  rule: z.string().default("import-graph-v0"),
  spec: CodeSpecSchema,
});
/** The fingerprint of an experiment's code. */
export type CodeFingerprint = z.infer<typeof CodeFingerprintSchema>;

/** The runtime a result was computed on (recorded, not fingerprinted). */
export const RuntimeSchema = z.object({
  deno: z.string(),
  v8: z.string(),
  typescript: z.string(),
  os: z.string(),
  arch: z.string(),
  cpus: z.number().int(),
  python: z.string().nullable(),
  torch: z.string().nullable(),
  numpy: z.string().nullable(),
  blas: z.string().nullable(),
  /** torch's default intra-op threads on this machine (a run's own count is in its config). */
  torch_threads: z.number().int().nullable(),
  device: z.string(),
  /**
   * The CPU's model and the instruction sets that pick float kernels (OpenBLAS, llama.cpp and
   * torch choose AVX2 or AVX-512 code by them), e.g. `Intel(R) Xeon(R) … (avx avx2 avx512f fma)`;
   * null where it was not recorded (records before it was) or cannot be read.
   */
  cpu: z.string().nullable().default(null),
});
/** The runtime a result was computed on. */
export type Runtime = z.infer<typeof RuntimeSchema>;

/** The checkout a result was computed from. */
export const GitStateSchema = z.object({
  commit: z.string().nullable(),
  /** Uncommitted changes outside the results and figures folders. */
  dirty: z.boolean(),
  /** SHA-256 of `git diff HEAD` plus the untracked files' names (null when clean). */
  diff_sha256: z.string().nullable(),
});
/** The checkout a result was computed from. */
export type GitState = z.infer<typeof GitStateSchema>;

/** A later checkout on which the result's canary reproduced exactly. */
export const ConfirmationSchema = z.object({
  git: GitStateSchema,
  code_hash: z.string(),
  /** Files whose code differed from the recorded fingerprint. */
  changed: z.array(z.string()),
  runtime: RuntimeSchema,
  at: z.string(),
});
/** A later checkout on which the result's canary reproduced exactly. */
export type Confirmation = z.infer<typeof ConfirmationSchema>;

/** `provenance.json`: what produced a results folder. */
export const ProvenanceSchema = z.object({
  /** The command that (re)produces the results. */
  command: z.string(),
  /** The experiment's full configuration. */
  config: z.json(),
  code: CodeFingerprintSchema,
  /** The checkout (null only in records written before it was recorded). */
  git: GitStateSchema.nullable().default(null),
  /** The runtime (null only in records written before it was recorded). */
  runtime: RuntimeSchema.nullable().default(null),
  deno: z.string(),
  created_at: z.string(),
  /** Later checkouts the canary confirmed, oldest first. */
  confirmations: z.array(ConfirmationSchema).default([]),
  /** Anything a reader must know about how this record was made. */
  note: z.string().optional(),
});
/** `provenance.json`: what produced a results folder. */
export type Provenance = z.infer<typeof ProvenanceSchema>;

/** SHA-256 (hex) of bytes or a string. */
export async function sha256Hex(data: Uint8Array | string): Promise<string> {
  const bytes = typeof data === "string" ? new TextEncoder().encode(data) : data;
  const digest = await crypto.subtle.digest("SHA-256", bytes as Uint8Array<ArrayBuffer>);
  return [...new Uint8Array(digest)].map((b) => b.toString(16).padStart(2, "0")).join("");
}

/**
 * The part of a source file that runs: lines that are whole-line comments (`//` and block
 * comments starting a line in TypeScript, `#` in Python), blank lines and trailing whitespace
 * are dropped; TypeScript lines are also trimmed (indentation carries no meaning there, unlike
 * Python's). The rule is line-based: a template literal line that starts with `//`, `#` or `/*`
 * would be taken for a comment (experiment code has none; the trade errs toward "current").
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
  modules: {
    kind?: string;
    specifier: string;
    npmPackage?: string;
    error?: string;
    dependencies?: { code?: { specifier?: string }; type?: { specifier?: string } }[];
  }[];
}

/** A file of an installed npm package: `node_modules/.deno/<dir>/node_modules/<name>/…`. */
const INSTALLED_NPM = /\/node_modules\/\.deno\/([^/]+)\/node_modules\/((?:@[^/]+\/)?[^/]+)\//;

/**
 * `name@version` of an npm import as `deno info` reports it: an `npm:` specifier
 * (`npm:/@scope/name@1.2.3/sub` too) under `nodeModulesDir: auto`, the installed file under
 * `manual` (the store folder is `<name with / as +>@<version>`, plus `_<peer>` suffixes).
 */
function npmName(specifier: string): string | null {
  if (specifier.startsWith("npm:")) {
    const rest = specifier.slice(4).replace(/^\//, "");
    const parts = rest.split("/");
    return rest.startsWith("@") ? `${parts[0]}/${parts[1]}` : parts[0];
  }
  const installed = INSTALLED_NPM.exec(decodeURIComponent(specifier));
  if (!installed) return null;
  const [, dir, name] = installed;
  const prefix = `${name.replace("/", "+")}@`;
  return dir.startsWith(prefix) ? `${name}@${dir.slice(prefix.length).split("_")[0]}` : null;
}

/** The in-scope local files of an entry point's graph and the npm packages they import. */
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
  const npm = new Set<string>();
  for (const m of info.modules) {
    if (m.error) throw new Error(`deno info ${entry}: ${m.specifier}: ${m.error}`);
    if (!m.specifier.startsWith("file://")) continue;
    const path = decodeURIComponent(new URL(m.specifier).pathname);
    if (!path.startsWith(`${root}/`)) {
      throw new Error(`${entry} imports ${path}, outside the repository ${root}`);
    }
    const rel = path.slice(root.length + 1);
    if (!inNumericsScope(rel)) continue;
    files.push(rel);
    for (const d of m.dependencies ?? []) {
      const name = npmName(d.code?.specifier ?? "");
      if (name) npm.add(name);
    }
  }
  return { files, npm: [...npm] };
}

async function expandPattern(pattern: string, root: string, what: string): Promise<string[]> {
  const star = pattern.lastIndexOf("/*");
  if (star < 0) return [pattern];
  const dir = pattern.slice(0, star);
  const suffix = pattern.slice(star + 2);
  const out: string[] = [];
  for await (const entry of Deno.readDir(`${root}/${dir}`)) {
    if (entry.isFile && entry.name.endsWith(suffix)) out.push(`${dir}/${entry.name}`);
  }
  if (out.length === 0) throw new Error(`${what}: ${pattern} matches no file`);
  return out.sort();
}

/**
 * Fingerprints the code and data of an experiment (see the module doc for the rule).
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * import { codeFingerprint } from "./provenance.ts";
 * const fp = await codeFingerprint({ entries: ["experiments/power.ts"] });
 * assert.ok("experiments/power.ts" in fp.files);
 * assert.ok(!("lib/loop/run.ts" in fp.files)); // not imported, not hashed
 * assert.equal(fp.rule, "numerics-v1");
 * // The npm packages it imports, by version (under nodeModulesDir manual as under auto).
 * assert.ok(fp.npm.includes("@stdlib/stats-base-dists-t-quantile@0.2.3"), String(fp.npm));
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
    for (const f of await expandPattern(pattern, root, "code.extra")) paths.add(f);
  }
  const files: Record<string, string> = {};
  for (const path of [...paths].sort()) {
    files[path] = await sha256Hex(codeText(path, await Deno.readTextFile(`${root}/${path}`)));
  }
  const data: Record<string, string> = {};
  for (const pattern of spec.data) {
    for (const f of await expandPattern(pattern, root, "code.data")) {
      data[f] = await sha256Hex(await Deno.readFile(`${root}/${f}`));
    }
  }
  const npmList = [...npm].sort();
  const lines = [
    ...Object.entries(files).map(([p, h]) => `file ${p} ${h}`),
    ...npmList.map((p) => `npm ${p}`),
    ...Object.entries(data).map(([p, h]) => `data ${p} ${h}`),
  ];
  return {
    hash: await sha256Hex(lines.join("\n")),
    files,
    npm: npmList,
    data,
    rule: "numerics-v1",
    spec,
  };
}

/** How two fingerprints differ. */
export interface FingerprintDiff {
  changed: string[];
  added: string[];
  removed: string[];
  npm_added: string[];
  npm_removed: string[];
  /** Data files whose bytes differ, appeared or disappeared. */
  data_changed: string[];
}

/**
 * The files, packages and data that differ between a stored fingerprint and the current one.
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * import { diffFingerprints } from "./provenance.ts";
 * const spec = { entries: ["x.ts"], extra: [], data: [] };
 * const base = { npm: [], data: {}, rule: "numerics-v1", spec };
 * const a = { ...base, hash: "0".repeat(64), files: { "x.ts": "1", "y.ts": "2" } };
 * const b = { ...base, hash: "1".repeat(64), files: { "x.ts": "9", "z.ts": "3" } };
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
  const dataPaths = new Set([
    ...Object.keys(stored.data ?? {}),
    ...Object.keys(current.data ?? {}),
  ]);
  return {
    changed: changed.sort(),
    added: added.sort(),
    removed: removed.sort(),
    npm_added: current.npm.filter((p) => !before.has(p)),
    npm_removed: stored.npm.filter((p) => !after.has(p)),
    data_changed: [...dataPaths].filter((p) => stored.data?.[p] !== current.data?.[p]).sort(),
  };
}

/** Every path a diff names (code files, then data files), for messages. */
export function diffPaths(diff: FingerprintDiff): string[] {
  return [...diff.changed, ...diff.added, ...diff.removed, ...diff.data_changed];
}

/** The difference in words (empty string: none). */
export function describeDiff(diff: FingerprintDiff): string {
  const parts: string[] = [];
  if (diff.changed.length) parts.push(`changed: ${diff.changed.join(", ")}`);
  if (diff.added.length) parts.push(`now imported: ${diff.added.join(", ")}`);
  if (diff.removed.length) parts.push(`no longer imported: ${diff.removed.join(", ")}`);
  if (diff.data_changed.length) parts.push(`data changed: ${diff.data_changed.join(", ")}`);
  if (diff.npm_added.length || diff.npm_removed.length) {
    parts.push(
      `npm packages: +[${diff.npm_added.join(", ")}] -[${diff.npm_removed.join(", ")}]`,
    );
  }
  return parts.join("; ");
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

async function run(cmd: string, args: string[], cwd: string): Promise<string | null> {
  try {
    const out = await new Deno.Command(cmd, { args, cwd, stdout: "piped", stderr: "null" })
      .output();
    return out.success ? new TextDecoder().decode(out.stdout) : null;
  } catch {
    return null;
  }
}

/**
 * The checkout's commit and whether it is dirty; the results and figures folders and `runs/`
 * are left out (an experiment writes there while it runs).
 */
export async function gitState(root: string = REPO_ROOT): Promise<GitState> {
  const commit = (await run("git", ["rev-parse", "HEAD"], root))?.trim() || null;
  const exclude = [":!experiments/results", ":!experiments/figures", ":!runs"];
  const status = await run("git", ["status", "--porcelain", "--", ".", ...exclude], root);
  if (commit === null || status === null || status.trim() === "") {
    return { commit, dirty: false, diff_sha256: null };
  }
  const diff = await run("git", ["diff", "HEAD", "--", ".", ...exclude], root) ?? "";
  const untracked = status.split("\n").filter((l) => l.startsWith("??")).join("\n");
  return { commit, dirty: true, diff_sha256: await sha256Hex(`${diff}\n${untracked}`) };
}

const RUNTIME_PY = `
import json, os, platform
out = {"python": platform.python_version(), "torch": None, "numpy": None, "blas": None,
       "torch_threads": None, "device": "cpu"}
try:
    import numpy
    out["numpy"] = numpy.__version__
except Exception:
    pass
try:
    import torch
    out["torch"] = torch.__version__
    out["torch_threads"] = torch.get_num_threads()
    if torch.cuda.is_available():
        out["device"] = "cuda:" + torch.cuda.get_device_name(0)
    torch.ones(64, 64) @ torch.ones(64, 64)
    try:
        from reins_worker.tools.cpu_probe import blas_library
    except ImportError:
        from reins_worker.cpu_probe import blas_library
    out["blas"] = blas_library()
except Exception:
    pass
print(json.dumps(out))
`;

/** The CPU flags that change which float kernels the numerical libraries run. */
const KERNEL_FLAGS = [
  "sse4_2",
  "avx",
  "avx2",
  "fma",
  "f16c",
  "avx512f",
  "avx512bw",
  "avx512vl",
  "avx512dq",
  "avx512_vnni",
  "avx512_bf16",
  "avx512_fp16",
  "amx_tile",
  "amx_bf16",
  "amx_int8",
  "asimd",
  "sve",
] as const;

/**
 * This machine's CPU as {@link RuntimeSchema}'s `cpu` describes it, from `/proc/cpuinfo`
 * (null elsewhere, or when it cannot be read).
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * import { cpuKind } from "./provenance.ts";
 * const text = "model name\t: Some CPU @ 2.80GHz\nflags\t\t: fpu avx2 sse4_2 avx fma ht\n";
 * assert.equal(cpuKind(text), "Some CPU @ 2.80GHz (sse4_2 avx avx2 fma)");
 * assert.equal(cpuKind(""), null);
 * ```
 */
export function cpuKind(cpuinfo: string): string | null {
  const field = (name: string) =>
    cpuinfo.split("\n").find((l) => l.startsWith(name))?.split(":").slice(1).join(":").trim();
  const model = field("model name") ?? field("Model") ?? field("CPU part");
  if (!model) return null;
  const flags = new Set((field("flags") ?? field("Features") ?? "").split(/\s+/));
  return `${model} (${KERNEL_FLAGS.filter((f) => flags.has(f)).join(" ")})`;
}

function readCpuKind(): string | null {
  try {
    return cpuKind(Deno.readTextFileSync("/proc/cpuinfo"));
  } catch {
    return null;
  }
}

let runtimeCache: Promise<Runtime> | null = null;

/**
 * The runtime of this machine: Deno, V8, TypeScript, OS, CPUs, and the worker's Python with
 * torch, numpy, the BLAS torch loaded, its default threads and device (`REINS_PYTHON`, else
 * `/usr/bin/python3`, else `python3`; nulls where there is none). Measured once per process.
 */
export function runtimeInfo(root: string = REPO_ROOT): Promise<Runtime> {
  runtimeCache ??= (async () => {
    let py: Record<string, unknown> = {};
    for (const python of [Deno.env.get("REINS_PYTHON"), "/usr/bin/python3", "python3"]) {
      if (!python) continue;
      try {
        const out = await new Deno.Command(python, {
          args: ["-c", RUNTIME_PY],
          env: { PYTHONPATH: `${root}/lib/trainer/worker`, PYTHONDONTWRITEBYTECODE: "1" },
          stdout: "piped",
          stderr: "null",
        }).output();
        if (!out.success) continue;
        py = JSON.parse(new TextDecoder().decode(out.stdout));
        if (py.torch) break;
      } catch {
        // try the next Python
      }
    }
    return {
      deno: Deno.version.deno,
      v8: Deno.version.v8,
      typescript: Deno.version.typescript,
      os: Deno.build.os,
      arch: Deno.build.arch,
      cpus: navigator.hardwareConcurrency,
      python: (py.python as string) ?? null,
      torch: (py.torch as string) ?? null,
      numpy: (py.numpy as string) ?? null,
      blas: (py.blas as string) ?? null,
      torch_threads: (py.torch_threads as number) ?? null,
      device: (py.device as string) ?? "cpu",
      cpu: readCpuKind(),
    };
  })();
  return runtimeCache;
}

/**
 * The runtime fields that differ between two records, in words (empty: none that matter to
 * the numbers — Deno, torch, numpy, Python, BLAS, architecture, device, CPU kind; a CPU that
 * was not recorded reads `unrecorded`).
 */
export function runtimeDifference(a: Runtime, b: Runtime): string {
  const keys = ["deno", "python", "torch", "numpy", "blas", "arch", "device", "cpu"] as const;
  const show = (v: string | null) => v ?? "unrecorded";
  return keys.filter((k) => a[k] !== b[k]).map((k) => `${k} ${show(a[k])} → ${show(b[k])}`)
    .join(", ");
}

/**
 * Whether two runtimes are one numeric platform: every field of {@link runtimeDifference}
 * equal, the CPU kind recorded on both. Only there is a canary expected to reproduce bit for
 * bit (`canary.ts`).
 */
export function samePlatform(a: Runtime, b: Runtime): boolean {
  return a.cpu !== null && b.cpu !== null && runtimeDifference(a, b) === "";
}

/**
 * Writes `provenance.json` into a results folder: the command, the config, the code
 * fingerprint, the git state and the runtime. Pass the fingerprint taken when the experiment
 * started: it is checked against the checkout again now, and an edit made while the experiment
 * ran throws {@link StaleResultsError} (naming the files) instead of recording code that did
 * not run.
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
  input: {
    command: string;
    config: unknown;
    code: CodeSpecInput | CodeFingerprint;
    git?: GitState;
    note?: string;
  },
  root: string = REPO_ROOT,
): Promise<Provenance> {
  let code: CodeFingerprint;
  if ("hash" in input.code) {
    code = input.code;
    const now = await codeFingerprint(code.spec, root);
    if (now.hash !== code.hash) {
      const diff = diffFingerprints(code, now);
      throw new StaleResultsError(
        dir,
        `the code changed while the experiment ran (${
          describeDiff(diff)
        }); not recording results under ${relative(dir)} — rerun \`${input.command}\``,
        diff,
      );
    }
  } else code = await codeFingerprint(input.code, root);
  const previous = await readProvenance(dir).catch(() => null);
  const provenance: Provenance = {
    command: input.command,
    config: JSON.parse(JSON.stringify(input.config ?? null)),
    code,
    git: input.git ?? await gitState(root),
    runtime: await runtimeInfo(root),
    deno: Deno.version.deno,
    created_at: new Date().toISOString(),
    // A rewrite of the same results keeps the confirmations of the same code.
    confirmations: previous?.code.hash === code.hash ? previous.confirmations : [],
    ...(input.note ? { note: input.note } : {}),
  };
  await writeProvenanceFile(dir, provenance);
  return provenance;
}

/** Writes a provenance record as is (validated). */
export async function writeProvenanceFile(dir: string, provenance: Provenance): Promise<void> {
  const checked = parseOrThrow(ProvenanceSchema, provenance, provenancePath(dir));
  await Deno.mkdir(dir, { recursive: true });
  await Deno.writeTextFile(provenancePath(dir), JSON.stringify(checked, null, 2) + "\n");
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

/** `dir` relative to the repository root when it lies inside it. */
export function relative(dir: string): string {
  return dir.startsWith(`${REPO_ROOT}/`) ? dir.slice(REPO_ROOT.length + 1) : dir;
}

/**
 * Checks that a results folder's fingerprint equals the checkout's (same rule, same spec):
 * the strict check a grid uses before resuming (mixing cells of two codes would make its
 * results belong to neither). Throws {@link StaleResultsError} naming every file that changed;
 * returns the provenance when they match. Whether results of other code are still _current_ is
 * the canary's question: `resultStatus` in `results_status.ts`.
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
        `results; rerun the experiment that writes them`,
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
      `${describeDiff(diff)}) — rerun \`${stored.command}\``,
    diff,
  );
}
