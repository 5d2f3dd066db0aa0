/**
 * Real harness CLIs (OpenCode, Claude Code, Codex, Qwen Code), unmodified, through the real
 * gateway + proxy against the scripted token-level upstream (Qwen3 tokenizer).
 *
 * For each CLI: two rollouts run by the controller's local backend with the CLI's resolver —
 * the scripted agent reads `calc.py`, edits it through that CLI's own edit tool, and answers;
 * once with the correct fix (reward 1 from the hidden unittest), once with a wrong one
 * (reward 0). Every call must be held by the gateway with the exact token ids the upstream saw
 * and sampled, and side conversations (title generation, memory extraction) must carry their
 * own conversation tag.
 *
 * Prints one line per CLI: `harness <name>: pass`, `harness <name>: skip <reason>` or
 * `harness <name>: fail`. Slow the first time (npm installs into ~/.cache/reins/harnesses);
 * run with `deno task test:harnesses`.
 *
 * @module
 */
import assert from "node:assert/strict";
import { capabilityToken } from "../lib/gateway/auth.ts";
import { LocalBackend } from "../lib/controller/local_backend.ts";
import { probeSandbox } from "../lib/controller/sandbox.ts";
import { startStack } from "../lib/stack/stack.ts";
import {
  type ScriptedCall,
  type ScriptedTurn,
  startScriptedUpstream,
} from "../lib/proxy/scripted_upstream.ts";
import type { ScriptedPolicyInput } from "../lib/proxy/scripted_upstream.ts";
import { loadQwen3Tokenizer } from "../lib/tokens/qwen3.ts";
import type { ModelRequestEvent, RolloutCreate } from "../lib/schema.ts";
import type { CliName } from "../lib/harness/cli/schema.ts";
import {
  BUGFIX,
  CLI_ADAPTERS,
  CLI_HARNESSES,
  cliLocalHarness,
  cliScriptedPolicy,
  CliUnavailableError,
  ensureCli,
  type PromptView,
  runSummary,
  type ScriptedFix,
  SIDE_CONVERSATIONS,
  viewPrompt,
} from "../lib/harness/cli/mod.ts";

const FIXTURE = new URL("./fixtures/harness_cli/bugfix", import.meta.url).pathname;
const TASK = "The unit test test_calc.py fails. Fix the bug in calc.py (do not edit the tests).";
const PYTHON = Deno.env.get("REINS_PYTHON") ?? "/usr/bin/python3";
const SECRET = "harness-cli-secret";
const ADMIN = "harness-cli-admin";
const ORDER: CliName[] = ["opencode", "claude_code", "codex", "qwen_code"];
/**
 * The real-CLI run is slow (npm installs on a cold cache), so it runs only when asked for with
 * `REINS_HARNESS_TESTS=1`, which `deno task test:harnesses` sets; `deno task test` leaves it out.
 */
const REQUESTED = Deno.env.get("REINS_HARNESS_TESTS") === "1";
/**
 * The wrong-fix run of each CLI goes through the controller's strict bubblewrap sandbox (hidden
 * `.git`, network cut except the proxy) when bubblewrap works here; `REINS_HARNESS_SANDBOX=1`
 * sandboxes every run, `=0` none.
 */
const SANDBOX_FLAG = Deno.env.get("REINS_HARNESS_SANDBOX");
/** `REINS_HARNESS_CLIS=codex,qwen_code` runs only those (the others print `skip`). */
const ONLY = Deno.env.get("REINS_HARNESS_CLIS")?.split(",").map((s) => s.trim()).filter(Boolean);

/**
 * Which side conversation each CLI opens on its own (asserted as a separate conversation), and
 * in which run: OpenCode titles every session; Qwen Code extracts memories only after a turn
 * answered without tools (its source schedules the extraction for user-query turns only), so
 * it gets a third, tool-free run.
 */
const SIDE: Partial<Record<CliName, { kind: keyof typeof SIDE_CONVERSATIONS; run: ScriptedFix }>> =
  {
    opencode: { kind: "title", run: "correct" },
    qwen_code: { kind: "memory", run: "answer" },
  };

Deno.test("cli resolvers reject bad options and a missing task, naming the field", () => {
  assert.throws(
    () => cliLocalHarness("codex", { model: "" }, { task: "x" }),
    /model: must not be empty/,
  );
  assert.throws(
    () => cliLocalHarness("codex", { bogus: 1 }, { task: "x" }),
    /bogus/,
  );
  assert.throws(() => cliLocalHarness("opencode", {}, { prompt: "x" }), /input\.task: must be/);
  const h = cliLocalHarness("qwen_code", { task_field: "prompt", model: "m" }, { prompt: "x" });
  assert.deepEqual(h.command.slice(h.command.indexOf("--cli"), h.command.indexOf("--cli") + 6), [
    "--cli",
    "qwen_code",
    "--task-field",
    "prompt",
    "--model",
    "m",
  ]);
  assert.deepEqual(Object.keys(CLI_HARNESSES).sort(), [...ORDER].sort());
});

Deno.test("run summaries: a run with no calls prints none, not Infinity–-Infinity", () => {
  const empty = runSummary({ wallMs: 1234, promptTokens: [], conversations: [], reward: null });
  assert.equal(empty, "1.2 s, 0 calls (none captured), prompt tokens none, reward none");
  assert.doesNotMatch(empty, /Infinity/);
  assert.equal(
    runSummary({
      wallMs: 9000,
      promptTokens: [812, 640, 1204],
      conversations: ["c0", "c0", "c1"],
      reward: 1,
      status: "succeeded",
      sandboxed: true,
    }),
    "9.0 s, 3 calls, 2 conversations, prompt tokens 640–1204, reward 1, sandboxed",
  );
});

Deno.test("each adapter writes its config under the fresh HOME, never elsewhere", () => {
  for (const name of ORDER) {
    const run = CLI_ADAPTERS[name].prepare({
      task: TASK,
      workdir: "/w",
      home: "/h",
      model: "m",
      openaiBaseUrl: "http://gw/proxy/r/a/v1",
      anthropicBaseUrl: "http://gw/proxy/r/a",
      apiKey: "rk_key",
      bin: "/bin/cli",
    });
    for (const path of Object.keys(run.files)) {
      assert.ok(path.startsWith("/h/"), `${name}: ${path}`);
    }
    assert.ok(run.argv.includes(TASK), `${name} gets the task on its command line`);
    assert.ok(
      JSON.stringify(run).includes("http://gw/proxy/r/a"),
      `${name} is pointed at the proxy`,
    );
  }
});

interface RunReport {
  reward: number | null;
  status: string;
  error: string | null;
  events: ModelRequestEvent[];
  file: string;
  log: string;
  wallMs: number;
  sandboxed: boolean;
  /** What the upstream received during this run. */
  upstreamCalls: ScriptedCall[];
}

Deno.test({
  name: "real CLIs run through the proxy: tool edits, exact tokens, side conversations, reward",
  ignore: !REQUESTED,
  fn: async (t) => {
    const tokenizer = await loadQwen3Tokenizer();
    let policy: ((input: ScriptedPolicyInput) => ScriptedTurn) | null = null;
    const upstream = await startScriptedUpstream({
      tokenizer,
      policy: (input) => policy ? policy(input) : { content: "no policy set" },
    });
    const { gateway } = await startStack({
      adminKey: ADMIN,
      secret: SECRET,
      leaseSweepMs: 0,
      proxy: {
        tokenizer,
        upstream: { kind: "token_level", endpoints: [upstream.url] },
        // CLIs ask for 32k-token answers; the scripted turns are short anyway.
        options: { max_tokens_limit: 4096 },
      },
    });
    await gateway.store.upsertModel({ name: "reins-policy", endpoints: [], version: 3, info: {} });
    const root = await Deno.makeTempDir({ prefix: "reins-harness-cli-" });
    const backend = new LocalBackend({ root, harnesses: CLI_HARNESSES, pollMs: 50 });
    const results: Record<string, string> = {};

    const support = await probeSandbox();
    const sandboxFor = (fix: ScriptedFix) =>
      SANDBOX_FLAG === "1" ||
      (SANDBOX_FLAG !== "0" && fix === "wrong" && support.bwrap && support.net);
    if (SANDBOX_FLAG !== "0" && !(support.bwrap && support.net)) {
      console.log(`harness-note: sandboxed runs not covered here: ${support.reason}`);
    }

    const runOne = async (cli: CliName, fix: ScriptedFix): Promise<RunReport> => {
      const sandboxed = sandboxFor(fix);
      const rolloutId = `${cli}-${fix}`;
      const create: RolloutCreate = {
        rollout_id: rolloutId,
        group_id: cli,
        input: { task: TASK },
        config: {
          timeout_s: 240,
          max_attempts: 1,
          harness: {
            name: cli,
            options: {
              workspace: FIXTURE,
              ...(sandboxed ? { sandbox: { enabled: true, strict: true } } : {}),
              reward: {
                command: [PYTHON, "-m", "unittest", "-q", "test_calc"],
                env: { PYTHONDONTWRITEBYTECODE: "1" },
                restore: ["test_calc.py"],
                edited_restore_reward: 0,
              },
            },
          },
        },
      };
      await gateway.store.createRollouts([create]);
      const [claimed] = await gateway.store.claimRollouts({
        worker: "harness-cli-test",
        limit: 1,
        lease_ms: 600_000,
      });
      assert.equal(claimed.rollout.rollout_id, rolloutId);
      const attemptId = claimed.attempt.attempt_id;
      const workdir = `${root}/attempts/${attemptId}/work`;
      policy = cliScriptedPolicy(cli, { workdir, fix });
      const log: string[] = [];
      const started = performance.now();
      const callsBefore = upstream.calls.length;
      const handle = await backend.start({
        rollout: claimed.rollout,
        attempt: claimed.attempt,
        token: capabilityToken(SECRET, rolloutId, attemptId),
        gatewayUrl: gateway.url,
        log: (chunk) => log.push(chunk.text),
      });
      const outcome = await handle.done;
      policy = null;
      let file = "";
      try {
        file = await Deno.readTextFile(`${workdir}/${BUGFIX.file}`);
      } catch { /* reported by the assertion below */ }
      await backend.release(attemptId);
      const events = (await gateway.store.listEvents(rolloutId, {
        type: "model_request",
      })) as ModelRequestEvent[];
      return {
        reward: outcome.reward,
        status: outcome.status,
        error: outcome.error,
        events,
        file,
        log: log.join(""),
        wallMs: performance.now() - started,
        upstreamCalls: upstream.calls.slice(callsBefore),
        sandboxed,
      };
    };

    const responseText = (e: ModelRequestEvent) =>
      tokenizer.decode(Array.from(e.payload.response_token_ids));
    const viewCache = new Map<ModelRequestEvent, PromptView>();
    const viewOf = (e: ModelRequestEvent): PromptView => {
      let view = viewCache.get(e);
      if (!view) {
        view = viewPrompt(tokenizer.decode(Array.from(e.payload.prompt_token_ids)));
        viewCache.set(e, view);
      }
      return view;
    };
    /** Every call the upstream answered is held by the gateway, token for token. */
    const checkCaptured = (cli: CliName, run: RunReport) => {
      assert.equal(
        run.events.length,
        run.upstreamCalls.length,
        `${cli}: the gateway holds every call the upstream answered`,
      );
      for (const event of run.events) {
        const p = event.payload;
        assert.equal(p.http_status, 200, `${cli}: call failed: ${p.error}`);
        assert.ok(p.response_token_ids.length > 0, "response ids recorded");
        assert.equal(p.response_logprobs.length, p.response_token_ids.length, "one logprob each");
        assert.ok(Array.from(p.response_logprobs).every(Number.isFinite), "finite logprobs");
        // Exact ids: the upstream received exactly these prompt ids and sampled exactly these.
        const prompt = Array.from(p.prompt_token_ids);
        const response = Array.from(p.response_token_ids);
        const sent = run.upstreamCalls.find((c) =>
          c.promptIds.length === prompt.length && c.promptIds.every((id, i) => id === prompt[i]) &&
          c.responseIds.length === response.length &&
          c.responseIds.every((id, i) => id === response[i])
        );
        assert.ok(sent, `${cli}: captured call matches an upstream call token for token`);
        assert.deepEqual(Array.from(p.response_logprobs), sent.logprobs.map(Math.fround));
        assert.ok(p.segment, `${cli}: call carries a segment tag`);
      }
    };
    const check = (cli: CliName, fix: ScriptedFix, run: RunReport) => {
      const context = `${cli}/${fix}: status ${run.status} ${run.error ?? ""}\n${
        run.log.slice(-3000)
      }`;
      assert.equal(run.status, "succeeded", context);
      assert.equal(run.reward, fix === "correct" ? 1 : 0, `${cli}/${fix} reward\n${context}`);
      const expected = fix === "correct" ? BUGFIX.correct : BUGFIX.wrong;
      assert.ok(run.file.includes(expected), `${cli}/${fix}: calc.py was edited\n${run.file}`);
      assert.ok(run.events.length >= 3, `${cli}: at least read, edit, answer (${context})`);
      checkCaptured(cli, run);
      const summary = run.events.map((e) => {
        const v = viewOf(e);
        const seg = e.payload.segment;
        return `${seg?.conversation}/${seg?.index}/${seg?.opened_by} tools=${v.tools.length} ` +
          `results=${v.toolResponses} system=${JSON.stringify(v.system.slice(0, 60))}`;
      }).join("\n");
      // The agent's own conversation is the one offering the CLI's edit tool, and the proxy
      // names it `main` (OpenCode's title generator, which may come first, is `side-title`).
      const editTool = cli === "codex" ? "exec_command" : cli === "claude_code" ? "Edit" : "edit";
      const agent = run.events.filter((e) =>
        viewOf(e).tools.includes(
          editTool,
        ) &&
        !Object.values(SIDE_CONVERSATIONS).some((re) => re.test(viewOf(e).system))
      );
      assert.ok(agent.length >= 3, `${cli}: agent conversation offers ${editTool}\n${summary}`);
      const agentConversation = agent[0].payload.segment!.conversation;
      assert.equal(
        agentConversation,
        "main",
        `${cli}: the agent's conversation is main\n${summary}`,
      );
      assert.ok(
        agent.every((e) => e.payload.segment?.conversation === agentConversation),
        `${cli}: the agent's calls form one conversation\n${summary}`,
      );
      const views = agent.map((e) => viewOf(e));
      assert.ok(
        agent.some((e) => responseText(e).includes("<tool_call>")),
        `${cli}: the agent made tool calls`,
      );
      for (const e of agent) {
        const prompt = tokenizer.decode(Array.from(e.payload.prompt_token_ids));
        assert.ok(prompt.includes(TASK), `${cli}: the task reaches the policy verbatim`);
        assert.ok(prompt.endsWith("<|im_start|>assistant\n"), `${cli}: generation prompt last`);
      }
      const final = agent.at(-1)!;
      assert.match(responseText(final), /Fixed calc\.py/, `${cli}: final answer last`);
      assert.deepEqual(
        views.map((v) => v.toolResponses).slice(0, 3),
        [0, 1, 2],
        `${cli}: read → edit → answer, each seeing the previous tool result\n${summary}`,
      );
    };

    const stats = (cli: CliName, fix: ScriptedFix, run: RunReport) => {
      const summary = runSummary({
        wallMs: run.wallMs,
        promptTokens: run.events.map((e) => e.payload.prompt_token_ids.length),
        conversations: run.events.map((e) => e.payload.segment?.conversation),
        reward: run.reward,
        status: run.status,
        sandboxed: run.sandboxed,
      });
      console.log(`harness-stats ${cli} ${fix}: ${summary}`);
    };
    const checkSide = (cli: CliName, run: RunReport) => {
      const side = SIDE[cli]!;
      const summary = run.events.map((e) => {
        const seg = e.payload.segment;
        return `${seg?.conversation}/${seg?.index}/${seg?.opened_by} ` +
          `system=${JSON.stringify(viewOf(e).system.slice(0, 60))}`;
      }).join("\n");
      assert.equal(run.status, "succeeded", `${cli}/${side.run}: ${run.error}\n${run.log}`);
      checkCaptured(cli, run);
      const branch = run.events.filter((e) => SIDE_CONVERSATIONS[side.kind].test(viewOf(e).system));
      const agent = run.events.filter((e) => !branch.includes(e));
      assert.ok(
        branch.length > 0,
        `${cli}: the ${side.kind} side conversation was captured\n${summary}`,
      );
      assert.ok(agent.length > 0, `${cli}: the agent conversation was captured\n${summary}`);
      const agentConversations = new Set(agent.map((e) => e.payload.segment?.conversation));
      const sideConversations = new Set(branch.map((e) => e.payload.segment?.conversation));
      assert.equal(agentConversations.size, 1, `${cli}: one agent conversation\n${summary}`);
      for (const id of sideConversations) {
        assert.ok(id, `${cli}: side calls carry a conversation tag`);
        assert.ok(
          !agentConversations.has(id),
          `${cli}: ${side.kind} is its own conversation\n${summary}`,
        );
        assert.equal(
          id,
          `side-${side.kind}`,
          `${cli}: side calls are labelled as such\n${summary}`,
        );
        const first = run.events.find((e) => e.payload.segment?.conversation === id)!;
        assert.equal(
          first.payload.segment?.opened_by,
          "branch",
          `${cli}: ${side.kind} opens a new conversation\n${summary}`,
        );
      }
    };

    try {
      for (const cli of ORDER) {
        const adapter = CLI_ADAPTERS[cli];
        if (ONLY && !ONLY.includes(cli)) {
          results[cli] = "skip not selected by REINS_HARNESS_CLIS";
          continue;
        }
        let available = true;
        try {
          await ensureCli(adapter);
        } catch (error) {
          if (!(error instanceof CliUnavailableError)) throw error;
          results[cli] = `skip ${error.reason}`;
          available = false;
        }
        if (!available) continue;
        const ok = await t.step({
          name: `${cli} (${adapter.package}@${adapter.version})`,
          fn: async () => {
            for (const fix of ["correct", "wrong"] as const) {
              const run = await runOne(cli, fix);
              stats(cli, fix, run);
              check(cli, fix, run);
              if (SIDE[cli]?.run === fix) checkSide(cli, run);
            }
            if (SIDE[cli]?.run === "answer") {
              const run = await runOne(cli, "answer");
              stats(cli, "answer", run);
              checkSide(cli, run);
            }
          },
        });
        results[cli] = ok ? "pass" : "fail";
      }
    } finally {
      await backend.close();
      await gateway.close();
      await upstream.close();
      await Deno.remove(root, { recursive: true }).catch(() => {});
      for (const cli of ORDER) console.log(`harness ${cli}: ${results[cli] ?? "fail"}`);
    }
  },
});
