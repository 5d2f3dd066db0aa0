/**
 * A canary's reference on one more numeric platform (`canary.ts`, "Platforms"), for
 * `deno task results:check --record-platform`.
 *
 * The reference is computed by the code the results were recorded or confirmed on, in a clean
 * clone of that commit (its own `deno install`, its own worker), never by the checkout being
 * checked: a reference must be what the results' code computes on this platform, and this
 * checkout's rerun is then compared with it like with any other reference. Only a commit that
 * was clean when it recorded or confirmed the results qualifies (a dirty one cannot be checked
 * out again); the newest such commit is used.
 *
 * @module
 */
import {
  canaryPath,
  type CanaryRecord,
  type CanarySpec,
  type PlatformReference,
  platformReference,
  readCanary,
} from "./canary.ts";
import { type Provenance, readProvenance, relative, REPO_ROOT, runtimeInfo } from "./provenance.ts";

/** A clean commit whose code the results' provenance vouches for, with its code hash. */
export interface VouchedCommit {
  commit: string;
  code_hash: string;
}

/**
 * The newest clean commit that recorded or confirmed a result set (null: none was clean).
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * import { vouchedCommit } from "./canary_platform.ts";
 * const git = (commit: string, dirty: boolean) => ({ commit, dirty, diff_sha256: null });
 * const provenance = {
 *   git: git("aaa", true),
 *   code: { hash: "h0" },
 *   confirmations: [
 *     { git: git("bbb", false), code_hash: "h1" },
 *     { git: git("ccc", true), code_hash: "h2" },
 *   ],
 * };
 * // deno-lint-ignore no-explicit-any
 * assert.deepEqual(vouchedCommit(provenance as any), { commit: "bbb", code_hash: "h1" });
 * ```
 */
export function vouchedCommit(provenance: Provenance): VouchedCommit | null {
  for (const c of [...provenance.confirmations].reverse()) {
    if (c.git.commit && !c.git.dirty) return { commit: c.git.commit, code_hash: c.code_hash };
  }
  const g = provenance.git;
  return g?.commit && !g.dirty ? { commit: g.commit, code_hash: provenance.code.hash } : null;
}

async function runOrThrow(cmd: string, args: string[], cwd: string, what: string) {
  const out = await new Deno.Command(cmd, { args, cwd, stdout: "piped", stderr: "piped" })
    .output();
  if (!out.success) {
    const d = new TextDecoder();
    throw new Error(
      `${what} failed: ${(d.decode(out.stdout) + d.decode(out.stderr)).trim().slice(-2000)}`,
    );
  }
}

/**
 * Runs a canary in a clean clone of `commit` (of the repository at `root`) and returns its
 * outputs as plain JSON.
 */
export async function canaryAtCommit(
  commit: string,
  spec: CanarySpec,
  root: string = REPO_ROOT,
): Promise<unknown> {
  const parent = await Deno.makeTempDir({ prefix: "reins_canary_at_" });
  const clone = `${parent}/reins`;
  try {
    await runOrThrow("git", ["clone", "--quiet", root, clone], parent, "git clone");
    await runOrThrow("git", ["checkout", "--quiet", "--detach", commit], clone, "git checkout");
    await runOrThrow(Deno.execPath(), ["install", "-q"], clone, `deno install at ${commit}`);
    // The script lives in the clone, so the clone's deno.json and node_modules resolve it.
    await Deno.writeTextFile(
      `${clone}/.canary_at_commit.ts`,
      'import { runCanary } from "./experiments/canary.ts";\n' +
        "const spec = JSON.parse(await Deno.readTextFile(Deno.args[0]));\n" +
        "const outputs = await runCanary(spec);\n" +
        "await Deno.writeTextFile(Deno.args[1], JSON.stringify(outputs));\n",
    );
    await Deno.writeTextFile(`${parent}/spec.json`, JSON.stringify(spec));
    await runOrThrow(
      Deno.execPath(),
      ["run", "-A", ".canary_at_commit.ts", `${parent}/spec.json`, `${parent}/outputs.json`],
      clone,
      `the canary at ${commit}`,
    );
    return JSON.parse(await Deno.readTextFile(`${parent}/outputs.json`));
  } finally {
    await Deno.remove(parent, { recursive: true }).catch(() => undefined);
  }
}

/** Options of {@link recordPlatform}. */
export interface RecordPlatformOptions {
  root?: string;
  /** How the canary runs at the vouched commit (default {@link canaryAtCommit}). */
  runAt?: (commit: string, spec: CanarySpec) => Promise<unknown>;
}

/**
 * Adds this platform's reference to a result set's canary, computed at its vouched commit,
 * unless this platform has one already. Returns what it did, in words; throws when it cannot.
 */
export async function recordPlatform(
  dir: string,
  options: RecordPlatformOptions = {},
): Promise<string> {
  const root = options.root ?? REPO_ROOT;
  const provenance = await readProvenance(dir);
  const record: CanaryRecord | null = await readCanary(dir);
  if (!provenance || !record) return "no provenance or canary: nothing to record";
  const runtime = await runtimeInfo(root);
  // The mechanism canary's recording is every platform's reference (`platformReference`).
  const own = platformReference(record, runtime);
  if (own) return `nothing to record: this platform has its reference (the ${own.name})`;
  if (runtime.cpu === null) {
    throw new Error("this machine's CPU kind cannot be read: a platform reference needs one");
  }
  const vouched = vouchedCommit(provenance);
  if (!vouched) {
    throw new Error(
      `${relative(dir)}: no clean commit recorded or confirmed these results, so none can ` +
        "compute a reference that stands for them",
    );
  }
  const t0 = performance.now();
  const runAt = options.runAt ?? ((commit, spec) => canaryAtCommit(commit, spec, root));
  const outputs = JSON.parse(JSON.stringify(await runAt(vouched.commit, record.spec)));
  const seconds = (performance.now() - t0) / 1000;
  const reference: PlatformReference = {
    outputs,
    seconds,
    git: { commit: vouched.commit, dirty: false, diff_sha256: null },
    runtime,
    code_hash: vouched.code_hash,
    recorded_at: new Date().toISOString(),
  };
  record.platforms.push(reference);
  await Deno.writeTextFile(canaryPath(dir), JSON.stringify(record, null, 1) + "\n");
  const same = JSON.stringify(outputs) === JSON.stringify(record.outputs)
    ? ", the same outputs as the recording"
    : "";
  return `recorded this platform's reference in ${relative(dir)}/canary.json (computed at ` +
    `${vouched.commit.slice(0, 7)} in ${seconds.toFixed(1)} s${same})`;
}
