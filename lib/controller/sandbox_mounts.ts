/**
 * What a sandboxed process needs from the host besides its own tree, and a start-up probe that
 * checks it can see it.
 *
 * The sandbox's root is the host's, read-only, but `/tmp` is a private tmpfs (see
 * {@link ./sandbox.ts}). A reins checkout, a Deno cache or a harness install cache under `/tmp`
 * would vanish inside, and the sandboxed process would fail with `Module not found`. So the reins
 * source tree, the Deno binary and cache, and every absolute path on the harness's command line
 * are bound back read-only when they lie under a directory the sandbox replaces; then a probe
 * runs the same mounts once and names any path still missing and why.
 *
 * @module
 */
import { dirname, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import { pathExists } from "./host_paths.ts";

/** Directories the sandbox mounts afresh (what the host has there is not visible inside). */
export const REPLACED_DIRS: readonly string[] = ["/tmp", "/dev", "/proc"];

/**
 * The root of the reins checkout this module belongs to (the directory holding `lib/`), or null
 * when reins is not loaded from local files.
 */
export const REINS_SOURCE_ROOT: string | null = (() => {
  const url = new URL("../..", import.meta.url);
  return url.protocol === "file:" ? fileURLToPath(url).replace(/\/$/, "") : null;
})();

function within(path: string, dir: string): boolean {
  return path === dir || path.startsWith(dir.endsWith("/") ? dir : `${dir}/`);
}

/**
 * The absolute host paths on a command line: each argument that is an existing absolute path,
 * and the value of each `--flag=/path` argument.
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * import { commandPaths } from "./sandbox_mounts.ts";
 * assert.deepEqual(
 *   commandPaths(["/bin/sh", "-c", "echo /etc/hostname", "--config=/etc/hostname", "/missing"]),
 *   ["/bin/sh", "/etc/hostname"],
 * );
 * ```
 */
export function commandPaths(argv: string[]): string[] {
  const out: string[] = [];
  for (const arg of argv) {
    const value = /^--[\w-]+=(\/.*)$/.exec(arg)?.[1] ?? arg;
    if (value.startsWith("/") && !value.includes("\n") && pathExists(value)) {
      out.push(resolve(value));
    }
  }
  return [...new Set(out)];
}

/** What {@link sourceMounts} decided. */
export interface SourceMounts {
  /** Host paths bound read-only at the same place (they lie under a replaced directory). */
  binds: string[];
  /** Host paths the sandboxed process must be able to read (checked by the probe). */
  needed: string[];
}

/**
 * Which host paths a sandboxed command needs (`needed`: the command line's absolute paths, the
 * Deno binary when it runs the sandbox's entry point, and that entry point) and which of those,
 * plus the reins source tree and `$DENO_DIR`, must be bound back because they lie under a
 * directory the sandbox replaces (`binds`, outermost first, nested ones dropped). Paths under
 * `own` (the attempt's directories, bound anyway) are left out.
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * import { sourceMounts } from "./sandbox_mounts.ts";
 * const dir = await Deno.makeTempDir({ dir: "/tmp" }); // the sandbox has a private /tmp
 * await Deno.writeTextFile(`${dir}/main.ts`, "");
 * const mounts = sourceMounts({
 *   argv: ["/bin/sh", `${dir}/main.ts`], env: {}, own: [], sourceRoot: null, extra: [],
 * });
 * assert.deepEqual(mounts.binds, [`${dir}/main.ts`]);
 * assert.deepEqual(mounts.needed, ["/bin/sh", `${dir}/main.ts`]);
 * await Deno.remove(dir, { recursive: true });
 * ```
 */
export function sourceMounts(req: {
  argv: string[];
  env: Record<string, string>;
  /** Directories bound by the sandbox itself (the agent's tree, its private dirs). */
  own: string[];
  /** The reins source tree (default {@link REINS_SOURCE_ROOT}). */
  sourceRoot?: string | null;
  /** More paths the process reads (e.g. the sandbox entry point and the Deno binary). */
  extra: string[];
}): SourceMounts {
  const isOwn = (p: string) => req.own.some((dir) => within(p, dir));
  const needed = [...new Set([...commandPaths(req.argv), ...req.extra])].filter((p) => !isOwn(p));
  const source = req.sourceRoot === undefined ? REINS_SOURCE_ROOT : req.sourceRoot;
  const candidates = [
    ...(source ? [source, ...linkedOut(source)] : []),
    ...(req.env.DENO_DIR ? [resolve(req.env.DENO_DIR)] : []),
    ...needed,
  ].filter((p) => REPLACED_DIRS.some((dir) => within(p, dir)) && pathExists(p) && !isOwn(p));
  const binds: string[] = [];
  for (const path of [...new Set(candidates)].sort((a, b) => a.length - b.length)) {
    if (!binds.some((outer) => within(path, outer))) binds.push(path);
  }
  return { binds, needed };
}

/**
 * The targets of `dir`'s top-level symlinks that lie outside it (e.g. a `node_modules` linked
 * from another checkout): inside the sandbox the link points there, so the target is needed too.
 */
function linkedOut(dir: string): string[] {
  const out: string[] = [];
  try {
    for (const entry of Deno.readDirSync(dir)) {
      if (!entry.isSymlink) continue;
      try {
        const target = Deno.realPathSync(`${dir}/${entry.name}`);
        if (!within(target, dir)) out.push(target);
      } catch { /* dangling link */ }
    }
  } catch { /* unreadable: nothing to add */ }
  return out;
}

/** bubblewrap arguments for {@link SourceMounts.binds}. */
export function bindArgs(binds: string[]): string[] {
  return binds.flatMap((path) => ["--ro-bind", path, path]);
}

const probes = new Map<string, Promise<{ missing: string[]; error: string | null }>>();

/**
 * Runs `bwrap` once with `layout` (the sandbox's filesystem arguments) and lists the `paths`
 * that cannot be read inside (cached per layout and paths). `error` is bubblewrap's own failure.
 *
 * @example
 * ```ts ignore
 * import { probeVisible } from "./sandbox_mounts.ts";
 * const { missing } = await probeVisible("bwrap", ["--ro-bind", "/", "/", "--tmpfs", "/tmp"],
 *   ["/etc/hostname", "/tmp/x"]);
 * missing; // ["/tmp/x"]
 * ```
 */
export function probeVisible(
  bwrap: string,
  layout: string[],
  paths: string[],
): Promise<{ missing: string[]; error: string | null }> {
  const key = JSON.stringify([bwrap, layout, paths]);
  let probe = probes.get(key);
  if (!probe) {
    probe = (async () => {
      const script = 'for p do [ -r "$p" ] || printf "%s\\n" "$p"; done';
      const out = await new Deno.Command(bwrap, {
        args: [...layout, "--", "/bin/sh", "-c", script, "sh", ...paths],
        stdout: "piped",
        stderr: "piped",
        stdin: "null",
      }).output();
      const text = new TextDecoder().decode(out.stdout);
      const missing = text.split("\n").filter(Boolean);
      const error = out.success ? null : new TextDecoder().decode(out.stderr).trim() ||
        `exit ${out.code}`;
      return { missing, error };
    })();
    probes.set(key, probe);
    // A failure may be transient (a bind source being created): do not cache it.
    probe.then((r) => r.error && probes.delete(key), () => probes.delete(key));
  }
  return probe;
}

/**
 * Why `path` is not visible inside: the hide entry that covers it, or the replaced directory it
 * lies under, or a generic reason.
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * import { invisibleBecause } from "./sandbox_mounts.ts";
 * assert.match(invisibleBecause("/data/tasks.jsonl", ["/data"]), /hidden by the sandbox's hide/);
 * assert.match(invisibleBecause("/tmp/x/main.ts", []), /under \/tmp/);
 * ```
 */
export function invisibleBecause(path: string, hidden: string[]): string {
  const mask = hidden.find((h) => within(path, h));
  if (mask) return `it is hidden by the sandbox's hide list (${mask})`;
  const replaced = REPLACED_DIRS.find((dir) => within(path, dir));
  if (replaced) {
    return `it lies under ${replaced}, which the sandbox replaces with a private mount`;
  }
  return `the sandbox's mounts do not expose it (is ${dirname(path)} readable by this user?)`;
}
