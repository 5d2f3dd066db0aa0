/**
 * OpenCode (`opencode-ai`) in `run` mode against the proxy's Chat Completions route.
 *
 * Facts this adapter relies on (checked with the pinned version): `opencode run "<task>"`
 * reads a config declaring a provider with `npm: "@ai-sdk/openai-compatible"`,
 * `options.baseURL` (…`/v1`) and the model as `provider/model`; it streams `POST
 * /v1/chat/completions` and also runs a title-generator side conversation (its own system
 * prompt: a branch for sample assembly). The config is passed through `OPENCODE_CONFIG` (a file
 * in the attempt's HOME) rather than an `opencode.json` in the agent's tree, so the verifier
 * never sees it; `permission` allows edits and shell commands without asking.
 *
 * @module
 */
import type { CliAdapter } from "./types.ts";

/**
 * The OpenCode adapter.
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * import { opencode } from "./opencode.ts";
 * const run = opencode.prepare({
 *   task: "fix calc.py", workdir: "/w", home: "/h", model: "reins-policy",
 *   openaiBaseUrl: "http://gw/proxy/r/a/v1", anthropicBaseUrl: "http://gw/proxy/r/a",
 *   apiKey: "rk_x", bin: "/cache/opencode",
 * });
 * assert.deepEqual(run.argv.slice(1, 2), ["run"]);
 * ```
 */
export const opencode: CliAdapter = {
  name: "opencode",
  package: "opencode-ai",
  version: "1.18.33",
  bin: "node_modules/.bin/opencode",
  defaultModel: "reins-policy",
  nodeMajor: null,
  wire: "openai_chat",
  prepare(ctx) {
    const configFile = `${ctx.home}/opencode.json`;
    const config = {
      $schema: "https://opencode.ai/config.json",
      provider: {
        reins: {
          npm: "@ai-sdk/openai-compatible",
          name: "reins",
          options: { baseURL: ctx.openaiBaseUrl, apiKey: ctx.apiKey },
          models: { [ctx.model]: { name: ctx.model } },
        },
      },
      model: `reins/${ctx.model}`,
      small_model: `reins/${ctx.model}`,
      enabled_providers: ["reins"],
      autoupdate: false,
      share: "disabled",
      permission: { edit: "allow", bash: "allow", webfetch: "deny" },
    };
    return {
      argv: [ctx.bin, "run", "--model", `reins/${ctx.model}`, ctx.task],
      env: {
        OPENCODE_CONFIG: configFile,
        // The network is closed except the proxy and npm: no model list, updates or plugins.
        OPENCODE_DISABLE_AUTOUPDATE: "1",
        OPENCODE_DISABLE_MODELS_FETCH: "1",
        OPENCODE_DISABLE_DEFAULT_PLUGINS: "1",
        OPENCODE_DISABLE_LSP_DOWNLOAD: "1",
        OPENCODE_DISABLE_SHARE: "1",
        OPENCODE_DISABLE_CLAUDE_CODE: "1",
        OPENCODE_DISABLE_EXTERNAL_SKILLS: "1",
      },
      files: { [configFile]: JSON.stringify(config, null, 2) },
    };
  },
};
