/**
 * Qwen Code (`@qwen-code/qwen-code`) in prompt mode against the proxy's Chat Completions route.
 *
 * Facts this adapter relies on (checked with the pinned version): `qwen -p "<task>"
 * --auth-type openai` reads `OPENAI_BASE_URL` (…`/v1`), `OPENAI_API_KEY` and `OPENAI_MODEL`,
 * streams `POST /v1/chat/completions`, and after the answer runs a memory-extraction side
 * conversation (its own system prompt: a branch for sample assembly). Without `--approval-mode
 * yolo` prompt mode offers no editing tools at all.
 *
 * @module
 */
import type { CliAdapter } from "./types.ts";

/**
 * The Qwen Code adapter.
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * import { qwenCode } from "./qwen_code.ts";
 * const run = qwenCode.prepare({
 *   task: "fix calc.py", workdir: "/w", home: "/h", model: "reins-policy",
 *   openaiBaseUrl: "http://gw/proxy/r/a/v1", anthropicBaseUrl: "http://gw/proxy/r/a",
 *   apiKey: "rk_x", bin: "/cache/qwen",
 * });
 * assert.equal(run.env.OPENAI_MODEL, "reins-policy");
 * ```
 */
export const qwenCode: CliAdapter = {
  name: "qwen_code",
  package: "@qwen-code/qwen-code",
  version: "0.24.4",
  bin: "node_modules/.bin/qwen",
  defaultModel: "reins-policy",
  nodeMajor: 20,
  wire: "openai_chat",
  prepare(ctx) {
    return {
      argv: [
        ctx.bin,
        "-p",
        ctx.task,
        "--auth-type",
        "openai",
        "--model",
        ctx.model,
        "--approval-mode",
        "yolo",
      ],
      env: {
        OPENAI_BASE_URL: ctx.openaiBaseUrl,
        OPENAI_API_KEY: ctx.apiKey,
        OPENAI_MODEL: ctx.model,
        QWEN_CODE_SUPPRESS_YOLO_WARNING: "1",
      },
      files: {
        [`${ctx.home}/.qwen/settings.json`]: JSON.stringify(
          {
            privacy: { usageStatisticsEnabled: false },
            telemetry: { enabled: false },
            general: { disableAutoUpdate: true, disableUpdateNag: true },
          },
          null,
          2,
        ),
      },
    };
  },
  async postInstall(prefix) {
    // npm drops the executable bit of the vendored ripgrep; Qwen Code then falls back to a
    // slower built-in grep and warns on every run.
    const dir = `${prefix}/node_modules/@qwen-code/qwen-code/vendor/ripgrep`;
    try {
      for await (const entry of Deno.readDir(dir)) {
        if (!entry.isDirectory) continue;
        try {
          await Deno.chmod(`${dir}/${entry.name}/rg`, 0o755);
        } catch { /* no rg for this platform */ }
      }
    } catch { /* no vendored ripgrep in this version */ }
  },
};
