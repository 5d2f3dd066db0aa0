/**
 * Is a committed result set still what this checkout computes? The check that replaces
 * refusing results of other code (`deno task results:check`, and the notebooks through
 * {@link resultStatus}):
 *
 * | state       | when                                                                                  |
 * | ----------- | ------------------------------------------------------------------------------------- |
 * | `current`   | the fingerprint (`provenance.ts`: the numerics scope and the data) is the recorded one |
 * | `confirmed` | the fingerprint moved, and the canary (`canary.ts`) reproduced its outputs exactly     |
 * | `stale`     | the canary differs (the first differing number and the changed files are named), or the fingerprint moved and no canary was recorded |
 *
 * A canary is compared with its reference from this numeric platform (`canary.ts`: the
 * recording, or one recorded for another CPU kind). On a platform none was recorded on, a
 * difference proves nothing: the canary is reported *unchecked* there (the state is then what
 * the fingerprint and the recorded confirmations say, never a failure), and
 * `--record-platform` adds this platform's reference, computed by the code the results were
 * recorded or confirmed on (`canary_platform.ts`), then checks this checkout against it.
 *
 * A confirmation can be recorded into `provenance.json` (`--record`): the newer code the result
 * was confirmed on; a later check of that same code takes the recorded confirmation instead of
 * rerunning the canary (`--all-canaries` reruns them all, as CI does). Canary reruns are cached per (result, fingerprint, commit, diff) under
 * `runs/canary-cache/`, so the notebooks reuse what `results:check` ran.
 *
 * Usage: `deno run -A experiments/results_status.ts [--all-canaries] [--record]
 * [--record-platform] [dir...]`
 * (default: every folder under `experiments/results/` with a `provenance.json`). Exit 1 when a
 * canary differs (the one staleness CI fails on: a result without a canary is reported stale,
 * not failed), 2 on bad arguments.
 *
 * @module
 */
import { parseArgs } from "node:util";
import { type CanaryOutcome, type CanaryRecord, readCanary, rerunCanary } from "./canary.ts";
import {
  codeFingerprint,
  describeDiff,
  diffFingerprints,
  diffPaths,
  type FingerprintDiff,
  gitState,
  type Provenance,
  readProvenance,
  relative,
  REPO_ROOT,
  runtimeInfo,
  sha256Hex,
  writeProvenanceFile,
} from "./provenance.ts";
import { recordPlatform } from "./canary_platform.ts";
import { DEFAULT_RESULTS_DIR } from "./results.ts";

/** What {@link resultStatus} found. */
export interface ResultStatus {
  dir: string;
  state: "current" | "confirmed" | "stale";
  /**
   * True when the canary was rerun and differs: the one kind of staleness CI fails on (a
   * result without a canary or without provenance is shown stale, and CI reports it).
   */
  canary_failed: boolean;
  /** One sentence: why, with the changed files and the first differing number. */
  reason: string;
  /** Files that differ from the recorded fingerprint (null: no provenance). */
  diff: FingerprintDiff | null;
  /** The canary rerun (null: not rerun). */
  canary: CanaryOutcome | null;
  provenance: Provenance | null;
  /** The recorded code hash, 12 hex digits. */
  code: string;
  /** The canary was rerun and no reference from this platform exists to compare it with. */
  unchecked: boolean;
}

/** Options of {@link resultStatus}. */
export interface ResultStatusOptions {
  /** Rerun the canary even when the fingerprint is the recorded one. */
  alwaysCanary?: boolean;
  /** Use and fill the canary cache (default true). */
  cache?: boolean;
  root?: string;
  /** How a canary is rerun (default {@link rerunCanary}; replaceable in tests). */
  rerun?: (record: CanaryRecord) => Promise<CanaryOutcome>;
}

const CACHE_DIR = `${REPO_ROOT}/runs/canary-cache`;

async function cached(key: string, run: () => Promise<CanaryOutcome>): Promise<CanaryOutcome> {
  const path = `${CACHE_DIR}/${key}.json`;
  try {
    return JSON.parse(await Deno.readTextFile(path)) as CanaryOutcome;
  } catch {
    const outcome = await run();
    await Deno.mkdir(CACHE_DIR, { recursive: true });
    await Deno.writeTextFile(path, JSON.stringify(outcome));
    return outcome;
  }
}

/**
 * The state of a result set (see the module doc). Reruns the canary only when the fingerprint
 * moved (or `alwaysCanary`).
 *
 * @example
 * ```ts ignore
 * const s = await resultStatus("experiments/results/mechanism_quick");
 * if (s.state === "stale") console.log(`STALE: ${s.reason}`);
 * ```
 */
export async function resultStatus(
  dir: string,
  options: ResultStatusOptions = {},
): Promise<ResultStatus> {
  const root = options.root ?? REPO_ROOT;
  const provenance = await readProvenance(dir);
  if (!provenance) {
    return {
      dir,
      state: "stale",
      reason: `${relative(dir)} has no provenance.json: nothing says what computed it`,
      diff: null,
      canary: null,
      canary_failed: false,
      provenance: null,
      code: "none",
      unchecked: false,
    };
  }
  const code = provenance.code.hash.slice(0, 12);
  const current = await codeFingerprint(provenance.code.spec, root);
  const diff = diffFingerprints(provenance.code, current);
  const moved = current.hash !== provenance.code.hash;
  if (!moved && !options.alwaysCanary) {
    return {
      dir,
      state: "current",
      reason: "same code and data",
      diff,
      canary: null,
      canary_failed: false,
      provenance,
      code,
      unchecked: false,
    };
  }
  const confirmed = provenance.confirmations.find((c) => c.code_hash === current.hash);
  if (confirmed && !options.alwaysCanary) {
    return {
      dir,
      state: "confirmed",
      reason: `code changed since the results (${describeDiff(diff)}); the canary reproduced ` +
        `every recorded number exactly on this code (commit ${
          confirmed.git.commit?.slice(0, 7) ?? "unknown"
        }${confirmed.git.dirty ? ", dirty" : ""}, ${confirmed.at.slice(0, 10)})`,
      diff,
      canary: null,
      canary_failed: false,
      provenance,
      code,
      unchecked: false,
    };
  }
  const record = await readCanary(dir);
  if (!record && provenance.code.rule !== current.rule) {
    return {
      dir,
      state: "stale",
      reason: `recorded under the earlier fingerprint rule (${provenance.code.rule}, the whole ` +
        `import graph) by code other than this checkout's, with no canary to confirm it — rerun ` +
        `\`${provenance.command}\``,
      diff,
      canary: null,
      canary_failed: false,
      provenance,
      code,
      unchecked: false,
    };
  }
  if (!record) {
    return {
      dir,
      state: moved ? "stale" : "current",
      reason: moved
        ? `code or data changed (${describeDiff(diff)}) and no canary is recorded to confirm ` +
          `the results — rerun \`${provenance.command}\``
        : "same code and data (no canary recorded)",
      diff,
      canary: null,
      canary_failed: false,
      provenance,
      code,
      unchecked: false,
    };
  }
  const git = await gitState(root);
  const key = await sha256Hex(
    [
      relative(dir),
      current.hash,
      await sha256Hex(JSON.stringify(record)),
      git.commit,
      git.diff_sha256,
    ]
      .join("|"),
  );
  const rerun = options.rerun ?? rerunCanary;
  const outcome = options.cache === false
    ? await rerun(record)
    : await cached(key, () => rerun(record));
  const files = diffPaths(diff);
  const what = moved ? `code changed since the results (${describeDiff(diff)})` : "same code";
  if (outcome.exact) {
    return {
      dir,
      state: moved ? "confirmed" : "current",
      reason: `${what}; the canary reproduced every recorded number exactly` +
        ` (${outcome.seconds.toFixed(1)} s)`,
      diff,
      canary: outcome,
      canary_failed: false,
      provenance,
      code,
      unchecked: false,
    };
  }
  if (!outcome.platform_recorded) {
    // No reference from this platform: the difference may be the CPU's alone.
    const why =
      `the canary cannot be checked on this platform (${
        outcome.runtime.cpu ?? "CPU kind unreadable"
      }): no reference was recorded on it, and it differs from the ${outcome.reference} ` +
      `(runtime: ${outcome.runtime_changed || "same"}) at ${outcome.difference}`;
    const state = !moved ? "current" : confirmed ? "confirmed" : "stale";
    return {
      dir,
      state,
      reason: state === "stale"
        ? `${what}, and ${why} — rerun \`${provenance.command}\``
        : `${
          state === "current" ? "same code" : `${what}, confirmed on a recorded platform`
        }; ${why}`,
      diff,
      canary: outcome,
      canary_failed: false,
      provenance,
      code,
      unchecked: true,
    };
  }
  return {
    dir,
    state: "stale",
    reason: `the canary differs at ${outcome.difference}; ${
      files.length ? `files changed since the results: ${files.join(", ")}` : "no file in the " +
        "numerics scope changed (a change outside it, e.g. a service layer, altered the numbers)"
    } (compared with the ${outcome.reference}) — rerun \`${provenance.command}\``,
    diff,
    canary: outcome,
    canary_failed: true,
    provenance,
    code,
    unchecked: false,
  };
}

/**
 * Appends a confirmation (the newer code the canary reproduced on) to `provenance.json`.
 * Nothing is written unless the state is `confirmed`.
 */
export async function recordConfirmation(
  status: ResultStatus,
  root: string = REPO_ROOT,
): Promise<boolean> {
  if (status.state !== "confirmed" || !status.provenance || !status.canary) return false;
  const p = status.provenance;
  const current = await codeFingerprint(p.code.spec, root);
  if (p.confirmations.some((c) => c.code_hash === current.hash)) return false;
  p.confirmations.push({
    git: status.canary.git,
    code_hash: current.hash,
    changed: status.diff ? diffPaths(status.diff) : [],
    runtime: await runtimeInfo(root),
    at: new Date().toISOString(),
  });
  await writeProvenanceFile(status.dir, p);
  return true;
}

/** Every results folder under `resultsDir` that has a `provenance.json`, sorted. */
export async function resultDirs(resultsDir: string = DEFAULT_RESULTS_DIR): Promise<string[]> {
  const out: string[] = [];
  for await (const entry of Deno.readDir(resultsDir)) {
    if (!entry.isDirectory) continue;
    try {
      await Deno.stat(`${resultsDir}/${entry.name}/provenance.json`);
      out.push(`${resultsDir}/${entry.name}`);
    } catch {
      // not a result set
    }
  }
  return out.sort();
}

async function main(): Promise<number> {
  const { values, positionals } = parseArgs({
    args: Deno.args,
    options: {
      "all-canaries": { type: "boolean", default: false },
      record: { type: "boolean", default: false },
      "record-platform": { type: "boolean", default: false },
      help: { type: "boolean", short: "h", default: false },
    },
    allowPositionals: true,
    strict: true,
  });
  if (values.help) {
    console.log(
      "usage: deno task results:check [--all-canaries] [--record] [--record-platform] [dir...]\n" +
        "  checks every committed result set: current, confirmed by its canary, or stale\n" +
        "  --all-canaries    rerun every canary, even of current or confirmed results\n" +
        "  --record          record the confirmations (the code a canary reproduced on)\n" +
        "  --record-platform where this platform has no canary reference, compute one in a\n" +
        "                    clean checkout of the commit the results were recorded or\n" +
        "                    confirmed on, then check this checkout against it",
    );
    return 0;
  }
  const dirs = positionals.length
    ? positionals.map((p) => p.startsWith("/") ? p : `${Deno.cwd()}/${p}`)
    : await resultDirs();
  let stale = 0;
  let failed = 0;
  let unchecked = 0;
  for (const dir of dirs) {
    if (values["record-platform"]) console.log(`${relative(dir)}: ${await recordPlatform(dir)}`);
    const s = await resultStatus(dir, {
      alwaysCanary: values["all-canaries"] || values["record-platform"],
    });
    const tag = s.state === "stale"
      ? "STALE    "
      : s.state === "confirmed"
      ? "confirmed"
      : "current  ";
    console.log(`${tag} ${relative(dir)}: ${s.reason}`);
    if (s.state === "stale") stale++;
    if (s.canary_failed) failed++;
    if (s.unchecked) unchecked++;
    if (values.record && (await recordConfirmation(s))) {
      console.log(`          recorded the confirmation in ${relative(dir)}/provenance.json`);
    }
  }
  console.log(
    `${dirs.length - stale}/${dirs.length} result sets current or confirmed; ` +
      `${failed} canar${failed === 1 ? "y" : "ies"} differ` +
      (unchecked
        ? `; ${unchecked} unchecked (no reference from this platform: \`--record-platform\`)`
        : ""),
  );
  return failed ? 1 : 0;
}

if (import.meta.main) {
  try {
    Deno.exit(await main());
  } catch (error) {
    console.error(`results:check: ${(error as Error).message}`);
    Deno.exit(2);
  }
}
