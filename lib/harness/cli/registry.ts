/**
 * The four pinned CLI adapters by name.
 *
 * @module
 */
import type { CliName } from "./schema.ts";
import { claudeCode } from "./claude_code.ts";
import { codex } from "./codex.ts";
import { opencode } from "./opencode.ts";
import { qwenCode } from "./qwen_code.ts";
import type { CliAdapter } from "./types.ts";

/**
 * Every adapter, keyed by harness name.
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * import { CLI_ADAPTERS } from "./registry.ts";
 * assert.equal(CLI_ADAPTERS.codex.package, "@openai/codex");
 * ```
 */
export const CLI_ADAPTERS: Record<CliName, CliAdapter> = {
  opencode,
  claude_code: claudeCode,
  codex,
  qwen_code: qwenCode,
};

/**
 * Looks an adapter up by name, with an error listing the known names.
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * import { cliAdapter } from "./registry.ts";
 * assert.equal(cliAdapter("qwen_code").version, "0.24.4");
 * ```
 */
export function cliAdapter(name: string): CliAdapter {
  const adapter = (CLI_ADAPTERS as Record<string, CliAdapter | undefined>)[name];
  if (!adapter) {
    throw new Error(
      `cli: unknown harness CLI "${name}" (known: ${Object.keys(CLI_ADAPTERS).join(", ")})`,
    );
  }
  return adapter;
}
