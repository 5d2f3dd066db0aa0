/**
 * Codex (`@openai/codex`) in `exec` mode against the proxy's Responses route.
 *
 * Facts this adapter relies on (checked with the pinned version): `codex exec
 * --skip-git-repo-check "<task>"` reads `$CODEX_HOME/config.toml` (default `$HOME/.codex`),
 * where a `model_providers.<name>` entry with `base_url` (…`/v1`), `env_key` and `wire_api =
 * "responses"` routes it to `POST /v1/responses` (streamed). Its own sandbox is turned off
 * (`danger-full-access`) because isolation is the controller's job (bubblewrap stages), and
 * approvals are `never` so it runs unattended.
 *
 * @module
 */
import type { CliAdapter } from "./types.ts";

function tomlString(value: string): string {
  return JSON.stringify(value);
}

/**
 * The Codex adapter.
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * import { codex } from "./codex.ts";
 * const run = codex.prepare({
 *   task: "fix calc.py", workdir: "/w", home: "/h", model: "reins-policy",
 *   openaiBaseUrl: "http://gw/proxy/r/a/v1", anthropicBaseUrl: "http://gw/proxy/r/a",
 *   apiKey: "rk_x", bin: "/cache/codex",
 * });
 * assert.deepEqual(Object.keys(run.files), ["/h/.codex/config.toml"]);
 * ```
 */
export const codex: CliAdapter = {
  name: "codex",
  package: "@openai/codex",
  version: "0.171.0",
  bin: "node_modules/.bin/codex",
  defaultModel: "reins-policy",
  nodeMajor: 16,
  wire: "openai_responses",
  prepare(ctx) {
    const codexHome = `${ctx.home}/.codex`;
    const config = [
      `model = ${tomlString(ctx.model)}`,
      `model_provider = "reins"`,
      `approval_policy = "never"`,
      `sandbox_mode = "danger-full-access"`,
      `check_for_update_on_startup = false`,
      ``,
      `[analytics]`,
      `enabled = false`,
      ``,
      `[model_providers.reins]`,
      `name = "reins"`,
      `base_url = ${tomlString(ctx.openaiBaseUrl)}`,
      `env_key = "REINS_CODEX_API_KEY"`,
      `wire_api = "responses"`,
      `request_max_retries = 1`,
      `stream_max_retries = 1`,
      ``,
    ].join("\n");
    return {
      argv: [ctx.bin, "exec", "--skip-git-repo-check", "--color", "never", ctx.task],
      env: { CODEX_HOME: codexHome, REINS_CODEX_API_KEY: ctx.apiKey },
      files: { [`${codexHome}/config.toml`]: config },
    };
  },
};
