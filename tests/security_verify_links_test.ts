/**
 * Attack: the agent cannot earn a reward by linking its answer to what the verifier can read.
 *
 * The local reward hook runs outside the sandbox, so it can read paths hidden from the agent
 * (the answers). An agent that plants `answer.txt -> <hidden answers>` (creating a link needs no
 * access to its target) would otherwise be paid by a verifier reading through the link. The
 * verification tree loses every link that leads outside it before the hook runs
 * (`removeEscapingLinks`, the same defense as the Kubernetes verifier), whether the tree is a
 * restored copy of a workspace or the agent's own directory.
 */
import assert from "node:assert/strict";
import type { Attempt, JsonObject, Rollout } from "../lib/schema.ts";
import type { LogChunk } from "../lib/controller/backend.ts";
import { LocalBackend } from "../lib/controller/local_backend.ts";
import type { RewardContext } from "../lib/controller/reward_hooks.ts";
import { probeSandbox } from "../lib/controller/sandbox.ts";
import { runningAttempt, runningRollout } from "./support/records.ts";

function rollout(id: string, options: JsonObject): Rollout {
  return runningRollout({
    rollout_id: id,
    input: { task: "what is 6 * 7?" },
    config: { timeout_s: 60, max_attempts: 1, harness: { name: "command", options } },
    version: 2,
  });
}

function attempt(rolloutId: string): Attempt {
  return runningAttempt({ attempt_id: `${rolloutId}-a1`, rollout_id: rolloutId });
}

/** The hidden answers, under /var/tmp (visible inside the sandbox unless hidden). */
async function hiddenAnswers(): Promise<string> {
  const data = `/var/tmp/reins-answers-${crypto.randomUUID()}`;
  await Deno.mkdir(`${data}/answers`, { recursive: true });
  await Deno.writeTextFile(`${data}/answers/a.txt`, "42\n");
  return data;
}

async function run(backend: LocalBackend, r: Rollout) {
  const logs: LogChunk[] = [];
  const outcome = await (await backend.start({
    rollout: r,
    attempt: attempt(r.rollout_id),
    token: "rk",
    gatewayUrl: "http://127.0.0.1:9",
    log: (c) => logs.push(c),
  })).done;
  const stdout = logs.filter((l) => l.stream === "stdout").map((l) => l.text).join("");
  return { outcome, stdout, info: outcome.info as Record<string, unknown> };
}

/** The verifier's check: the answer file holds exactly 42. */
const CHECK = ["sh", "-c", "grep -qx 42 answer.txt && echo 1 || echo 0"];

const support = await probeSandbox();

Deno.test({
  name: "attack: a sandboxed agent links answer.txt to the hidden answers: reward 0, link removed",
  ignore: !support.bwrap,
  async fn() {
    const root = await Deno.makeTempDir();
    const data = await hiddenAnswers();
    const repo = await Deno.makeTempDir({ prefix: "reins-task-" });
    await Deno.writeTextFile(`${repo}/answer.txt`, "TODO\n");
    const backend = new LocalBackend({ root, pollMs: 20 });
    // The agent cannot read the answer (hidden), but it can point a link at it.
    const script = [
      `cat ${data}/answers/a.txt 2>/dev/null || echo answer=unreadable`,
      "rm -f answer.txt",
      `ln -s ${data}/answers/a.txt answer.txt`,
      // A relative link that climbs out of the tree, and a directory link: both escape too.
      `ln -s ../../../../../../../../../..${data}/answers answers_dir`,
    ].join("\n");
    const { outcome, stdout, info } = await run(
      backend,
      rollout("lk1", {
        command: ["bash", "-c", script],
        workspace: repo,
        sandbox: { enabled: true, strict: true, network: "host", hide: [`${data}/answers`] },
        reward: { command: CHECK },
      }),
    );
    assert.equal(outcome.status, "succeeded", `${outcome.error}\n${stdout}`);
    assert.match(stdout, /^answer=unreadable$/m);
    assert.equal(outcome.reward, 0, "a link to the hidden answers must not be paid");
    assert.deepEqual(info.removed_links, ["answer.txt", "answers_dir"]);
    assert.ok((info.flags as string[]).includes("escaping_link"));
    // The host's answers are untouched (the link was removed, not its target).
    assert.equal(await Deno.readTextFile(`${data}/answers/a.txt`), "42\n");
    await Deno.remove(root, { recursive: true });
    await Deno.remove(repo, { recursive: true });
    await Deno.remove(data, { recursive: true });
  },
});

Deno.test("attack: without a workspace, a link to a host file read by a reward function pays 0", async () => {
  const root = await Deno.makeTempDir();
  const data = await hiddenAnswers();
  const seen: (string | null)[] = [];
  const exact = (ctx: RewardContext) => {
    let answer: string | null = null;
    try {
      answer = Deno.readTextFileSync(`${ctx.dir}/answer.txt`).trim();
    } catch { /* no answer */ }
    seen.push(answer);
    return answer === "42" ? 1 : 0;
  };
  const backend = new LocalBackend({ root, pollMs: 20, rewardFunctions: { exact } });
  const { outcome, info } = await run(
    backend,
    rollout("lk2", {
      command: ["sh", "-c", `ln -s ${data}/answers/a.txt answer.txt`],
      reward: { function: "exact" },
    }),
  );
  assert.equal(outcome.status, "succeeded", outcome.error ?? "");
  assert.equal(outcome.reward, 0);
  assert.deepEqual(seen, [null]);
  assert.deepEqual(info.removed_links, ["answer.txt"]);
  await Deno.remove(root, { recursive: true });
  await Deno.remove(data, { recursive: true });
});

Deno.test("verification keeps links inside the tree: an honest answer behind a link is paid", async () => {
  const root = await Deno.makeTempDir();
  const repo = await Deno.makeTempDir({ prefix: "reins-task-" });
  await Deno.writeTextFile(`${repo}/answer.txt`, "TODO\n");
  const backend = new LocalBackend({ root, pollMs: 20 });
  const { outcome, info } = await run(
    backend,
    rollout("lk3", {
      command: [
        "sh",
        "-c",
        "mkdir out && echo 42 > out/a.txt && rm answer.txt && " +
        "ln -s out/a.txt answer.txt",
      ],
      workspace: repo,
      reward: { command: CHECK },
    }),
  );
  assert.equal(outcome.status, "succeeded", outcome.error ?? "");
  assert.equal(outcome.reward, 1);
  assert.equal(info.removed_links, undefined);
  await Deno.remove(root, { recursive: true });
  await Deno.remove(repo, { recursive: true });
});
