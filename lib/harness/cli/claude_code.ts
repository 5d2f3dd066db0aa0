/**
 * Claude Code (`@anthropic-ai/claude-code`) in print mode against the proxy's Anthropic
 * Messages route.
 *
 * Facts this adapter relies on (checked with the pinned version): `claude -p "<task>"` probes
 * `HEAD $ANTHROPIC_BASE_URL` and streams `POST /v1/messages`; a model name it does not know
 * makes it send `system` turns inside `messages`, so the default is a known Claude name (the
 * proxy only uses the name to look up the policy version); edits need `--permission-mode
 * acceptEdits` and shell commands an `--allowedTools` entry in print mode.
 *
 * @module
 */
import type { CliAdapter } from "./types.ts";

/**
 * The Claude Code adapter.
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * import { claudeCode } from "./claude_code.ts";
 * const run = claudeCode.prepare({
 *   task: "fix calc.py", workdir: "/w", home: "/h", model: "claude-sonnet-4-6",
 *   openaiBaseUrl: "http://gw/proxy/r/a/v1", anthropicBaseUrl: "http://gw/proxy/r/a",
 *   apiKey: "rk_x", bin: "/cache/claude",
 * });
 * assert.equal(run.env.ANTHROPIC_BASE_URL, "http://gw/proxy/r/a");
 * ```
 */
export const claudeCode: CliAdapter = {
  name: "claude_code",
  package: "@anthropic-ai/claude-code",
  version: "2.1.332",
  bin: "node_modules/.bin/claude",
  defaultModel: "claude-sonnet-4-6",
  nodeMajor: null,
  wire: "anthropic_messages",
  prepare(ctx) {
    const configDir = `${ctx.home}/.claude`;
    return {
      argv: [
        ctx.bin,
        "-p",
        ctx.task,
        "--model",
        ctx.model,
        "--permission-mode",
        "acceptEdits",
        "--allowedTools",
        "Bash,Read,Edit,Write,Glob,Grep",
      ],
      env: {
        ANTHROPIC_BASE_URL: ctx.anthropicBaseUrl,
        ANTHROPIC_API_KEY: ctx.apiKey,
        CLAUDE_CONFIG_DIR: configDir,
        // The network is closed except the proxy: no telemetry, updates or error reports.
        DISABLE_TELEMETRY: "1",
        DISABLE_AUTOUPDATER: "1",
        DISABLE_ERROR_REPORTING: "1",
        DISABLE_BUG_COMMAND: "1",
        CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC: "1",
      },
      files: {
        [`${configDir}/settings.json`]: JSON.stringify(
          {
            permissions: { allow: ["Bash", "Read", "Edit", "Write", "Glob", "Grep"] },
            autoUpdates: false,
          },
          null,
          2,
        ),
      },
    };
  },
};
