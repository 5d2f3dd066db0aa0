/**
 * Running a real CLI by hand: `deno task policy` serves a scripted policy that a gateway's proxy
 * calls (a side conversation is labelled `side-title`, not `main`), and `deno task run-cli`
 * runs real OpenCode against that gateway as one rollout and verifies its fix (the real-CLI part
 * only with `REINS_HARNESS_TESTS=1`, as `deno task test:harnesses` sets: npm installs are slow).
 */
import assert from "node:assert/strict";
import OpenAI from "openai";
import { startStack } from "../lib/stack/stack.ts";
import { loadQwen3Tokenizer } from "../lib/tokens/qwen3.ts";

const ROOT = decodeURIComponent(new URL("../", import.meta.url).pathname);
const ADMIN = "run-cli-admin";

function spawn(script: string, args: string[], env: Record<string, string> = {}) {
  return new Deno.Command(Deno.execPath(), {
    args: ["run", "-A", `${ROOT}scripts/${script}`, ...args],
    cwd: ROOT,
    env,
    stdout: "piped",
    stderr: "piped",
  });
}

/** Reads the child's stdout until a line matches. */
async function waitForLine(
  stream: ReadableStream<Uint8Array>,
  pattern: RegExp,
): Promise<RegExpMatchArray> {
  const reader = stream.getReader();
  const decoder = new TextDecoder();
  let text = "";
  while (true) {
    const { value, done } = await reader.read();
    if (done) throw new Error(`no line matching ${pattern} in:\n${text}`);
    text += decoder.decode(value, { stream: true });
    const m = text.match(pattern);
    if (m) {
      reader.releaseLock();
      return m;
    }
  }
}

Deno.test("policy and run-cli refuse bad arguments with exit status 2", async () => {
  const both = await spawn("policy.ts", []).output();
  assert.equal(both.code, 2);
  assert.match(new TextDecoder().decode(both.stderr), /--scripted or --worker: choose exactly one/);
  const bad = await spawn("policy.ts", ["--scripted", "bugfix:vim"]).output();
  assert.equal(bad.code, 2);
  assert.match(new TextDecoder().decode(bad.stderr), /unknown harness CLI "vim"/);
  const badPort = await spawn("policy.ts", ["--scripted", "bugfix:opencode", "--port", "70000"])
    .output();
  assert.equal(badPort.code, 2);
  assert.match(
    new TextDecoder().decode(badPort.stderr),
    /--port: expected a port number, got '70000'/,
  );
  const noCli = await spawn("run_cli.ts", ["emacs"]).output();
  assert.equal(noCli.code, 2);
  assert.match(new TextDecoder().decode(noCli.stderr), /expected one of opencode, claude/);
  const noKey = await spawn("run_cli.ts", ["codex", "--admin-key-file", "/nonexistent"]).output();
  assert.equal(noKey.code, 2);
  assert.match(new TextDecoder().decode(noKey.stderr), /admin key: set \$REINS_ADMIN_KEY/);
});

Deno.test({
  name: "policy serves a scripted agent behind a gateway; run-cli runs real OpenCode against it",
  sanitizeResources: false,
  sanitizeOps: false,
  fn: async (t) => {
    const workdir = await Deno.makeTempDir({ prefix: "reins_run_cli_" });
    const child = spawn("policy.ts", [
      "--scripted",
      "bugfix:opencode",
      "--port",
      "0",
      "--workdir",
      workdir,
    ]).spawn();
    const [, url] = await waitForLine(child.stdout, /policy: (http:\/\/\S+)/);
    const tokenizer = await loadQwen3Tokenizer();
    const { gateway } = await startStack({
      adminKey: ADMIN,
      secret: "run-cli-secret",
      leaseSweepMs: 0,
      proxy: {
        tokenizer,
        upstream: { kind: "token_level", endpoints: [url] },
        options: { max_tokens_limit: 4096 },
      },
    });
    try {
      await t.step(
        "a title request through the proxy is answered and tagged side-title",
        async () => {
          await gateway.store.createRollouts([{ rollout_id: "t1", input: {} }]);
          const [claimed] = await gateway.store.claimRollouts({
            worker: "t",
            limit: 1,
            lease_ms: 60_000,
          });
          const { capabilityToken } = await import("../lib/gateway/auth.ts");
          const client = new OpenAI({
            baseURL: `${gateway.url}/proxy/t1/${claimed.attempt.attempt_id}/v1`,
            apiKey: capabilityToken("run-cli-secret", "t1", claimed.attempt.attempt_id),
          });
          const answer = await client.chat.completions.create({
            model: "reins-policy",
            messages: [
              { role: "system", content: "You are a title generator. Output a title." },
              { role: "user", content: "Fix calc.py" },
            ],
          });
          assert.equal(answer.choices[0].message.content, "Fix add in calc.py");
          const [call] = await gateway.store.listEvents("t1", { type: "model_request" });
          assert.equal(
            call.type === "model_request" && call.payload.segment?.conversation,
            "side-title",
          );
        },
      );

      await t.step({
        name: "run-cli opencode fixes calc.py through the gateway (REINS_HARNESS_TESTS=1)",
        ignore: Deno.env.get("REINS_HARNESS_TESTS") !== "1",
        fn: async () => {
          const out = await spawn("run_cli.ts", [
            "opencode",
            "--gateway",
            gateway.url,
            "--workdir",
            workdir,
          ], {
            REINS_ADMIN_KEY: ADMIN,
            PATH: Deno.env.get("PATH") ?? "",
            HOME: Deno.env.get("HOME") ?? "",
          })
            .output();
          const text = new TextDecoder().decode(out.stdout) + new TextDecoder().decode(out.stderr);
          assert.equal(out.code, 0, text);
          assert.match(
            text,
            /opencode exited 0; \d+ model call\(s\) \(side-title 1, main \d+\); reward 1/,
          );
          assert.match(
            text,
            new RegExp(`calls in the UI: ${gateway.url}/ui/rollouts/cli-opencode-`),
          );
          assert.match(await Deno.readTextFile(`${workdir}/calc.py`), /return a \+ b/);
        },
      });
    } finally {
      child.kill("SIGTERM");
      await child.status;
      await gateway.close();
      await Deno.remove(workdir, { recursive: true });
    }
  },
});
