/**
 * Existence checks on host paths, shared by the sandbox (which masks or binds only what exists)
 * and the reward hooks (which compare the agent's tree with the pristine one).
 *
 * @module
 */

/**
 * True when something exists at `path`. By default a symbolic link counts as its target (a
 * dangling link does not exist); with `followLinks: false` a link counts as itself, so a link the
 * agent planted is seen even when it points nowhere.
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * import { pathExists } from "./host_paths.ts";
 * const dir = Deno.makeTempDirSync();
 * Deno.symlinkSync(`${dir}/missing`, `${dir}/link`);
 * assert.equal(pathExists(dir), true);
 * assert.equal(pathExists(`${dir}/link`), false);
 * assert.equal(pathExists(`${dir}/link`, { followLinks: false }), true);
 * Deno.removeSync(dir, { recursive: true });
 * ```
 */
export function pathExists(path: string, options: { followLinks?: boolean } = {}): boolean {
  try {
    if (options.followLinks === false) Deno.lstatSync(path);
    else Deno.statSync(path);
    return true;
  } catch {
    return false;
  }
}
