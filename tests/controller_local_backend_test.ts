import assert from "node:assert/strict";
import type { AttemptHandle, AttemptOutcome, LogChunk } from "../lib/controller/backend.ts";
import { SpecError } from "../lib/controller/backend.ts";
import { LocalBackend } from "../lib/controller/local_backend.ts";
import { parseRewardOutput } from "../lib/controller/reward_hooks.ts";
import { backendRollout, backendSpec } from "./support/records.ts";

const rollout = backendRollout;
const spec = backendSpec;

/** Processes of a process group that are not zombies (a zombie waits for its parent only). */
function liveMembers(pgid: number): number {
  let count = 0;
  for (const entry of Deno.readDirSync("/proc")) {
    if (!/^\d+$/.test(entry.name)) continue;
    try {
      const stat = Deno.readTextFileSync(`/proc/${entry.name}/stat`);
      const rest = stat.slice(stat.lastIndexOf(")") + 2).split(" ");
      if (Number(rest[2]) === pgid && rest[0] !== "Z") count++;
    } catch { /* exited meanwhile */ }
  }
  return count;
}

function command(argv: string[], extra: Record<string, unknown> = {}) {
  return { harness: { name: "command", options: { command: argv, ...extra } } };
}

Deno.test("local backend: exit code 0 succeeds, the env carries proxy URLs, token and input", async () => {
  const root = await Deno.makeTempDir();
  const backend = new LocalBackend({ root, pollMs: 20 });
  const logs: LogChunk[] = [];
  const script = 'echo "$OPENAI_BASE_URL|$ANTHROPIC_BASE_URL|$OPENAI_API_KEY|$REINS_ROLLOUT_ID"; ' +
    'cat "$REINS_INPUT_FILE"; echo; pwd; echo oops >&2';
  const handle = await backend.start(spec(rollout("r1", command(["sh", "-c", script])), logs));
  const outcome = await handle.done;
  assert.deepEqual(outcome.status, "succeeded");
  assert.deepEqual(outcome.exit_code, 0);
  const stdout = logs.filter((l) => l.stream === "stdout").map((l) => l.text).join("");
  const [urls, input, cwd] = stdout.trim().split("\n");
  assert.deepEqual(
    urls,
    "http://127.0.0.1:9/proxy/r1/r1-a1/v1|http://127.0.0.1:9/proxy/r1/r1-a1|rk_test|r1",
  );
  assert.deepEqual(JSON.parse(input), { q: 1 });
  assert.deepEqual(cwd, `${root}/attempts/r1-a1/work`);
  assert.deepEqual(logs.filter((l) => l.stream === "stderr").map((l) => l.text).join(""), "oops\n");
  await backend.release("r1-a1");
  assert.deepEqual(await backend.known(), []);
  await Deno.remove(root, { recursive: true });
});

Deno.test("local backend: non-zero exit fails, a signal death is reported as a crash", async () => {
  const root = await Deno.makeTempDir();
  const backend = new LocalBackend({ root, pollMs: 20 });
  const failed = await (await backend.start(spec(rollout("r2", command(["sh", "-c", "exit 3"])))))
    .done;
  assert.deepEqual(failed.status, "failed");
  assert.deepEqual(failed.exit_code, 3);
  assert.deepEqual(failed.error, "harness exited with code 3");
  const crashed =
    await (await backend.start(spec(rollout("r3", command(["sh", "-c", "kill -9 $$"])))))
      .done;
  assert.deepEqual(crashed.status, "failed");
  assert.match(crashed.error ?? "", /killed by signal 9/);
  await Deno.remove(root, { recursive: true });
});

Deno.test("local backend: a timeout kills the whole process group", async () => {
  const root = await Deno.makeTempDir();
  const backend = new LocalBackend({ root, pollMs: 20 });
  const pidFile = `${root}/grandchild.pid`;
  const r = rollout("r4", {
    ...command(["sh", "-c", `sleep 60 & echo $! > ${pidFile}; sleep 60`]),
    timeout_s: 0.5,
  });
  const t0 = Date.now();
  const outcome = await (await backend.start(spec(r))).done;
  assert.deepEqual(outcome.status, "timeout");
  assert.ok(Date.now() - t0 < 5000, "the timeout ended the attempt promptly");
  const grandchild = Number((await Deno.readTextFile(pidFile)).trim());
  let alive = true;
  for (let i = 0; i < 50 && alive; i++) {
    alive = (() => {
      try {
        const stat = Deno.readTextFileSync(`/proc/${grandchild}/stat`);
        return !/\) [ZX] /.test(stat);
      } catch {
        return false;
      }
    })();
    if (alive) await new Promise((r) => setTimeout(r, 20));
  }
  assert.ok(!alive, "the background grandchild was killed with its group");
  await Deno.remove(root, { recursive: true });
});

Deno.test("local backend: bad harness specs throw SpecError naming the field", async () => {
  const root = await Deno.makeTempDir();
  const backend = new LocalBackend({ root });
  await assert.rejects(
    () => backend.start(spec(rollout("b1", {}))),
    (e: Error) => e instanceof SpecError && e.message.startsWith("config.harness:"),
  );
  await assert.rejects(
    () => backend.start(spec(rollout("b2", { harness: { name: "nope", options: {} } }))),
    (e: Error) => e instanceof SpecError && /unknown harness "nope"/.test(e.message),
  );
  await assert.rejects(
    () => backend.start(spec(rollout("b3", command([])))),
    (e: Error) => e instanceof SpecError && e.message.startsWith("config.harness.options.command"),
  );
  await assert.rejects(
    () => backend.start(spec(rollout("b4", command(["true"], { workspace: "/nonexistent/x" })))),
    (e: Error) => e instanceof SpecError && /workspace/.test(e.message),
  );
  await assert.rejects(
    () => backend.start(spec(rollout("b5", command(["true"], { reward: { timeout_s: 1 } })))),
    (e: Error) => e instanceof SpecError && /exactly one of command or function/.test(e.message),
  );
  await Deno.remove(root, { recursive: true });
});

Deno.test("local backend: a registered harness resolves to a command", async () => {
  const root = await Deno.makeTempDir();
  const backend = new LocalBackend({
    root,
    harnesses: { echo: (options) => ({ command: ["echo", String(options.word)] }) },
  });
  const logs: LogChunk[] = [];
  const r = rollout("h1", { harness: { name: "echo", options: { word: "hello" } } });
  assert.deepEqual((await (await backend.start(spec(r, logs))).done).status, "succeeded");
  assert.deepEqual(logs.map((l) => l.text).join(""), "hello\n");
  await Deno.remove(root, { recursive: true });
});

Deno.test("reward hooks: stdout number, JSON value, or the exit code decide the reward", async () => {
  assert.deepEqual(parseRewardOutput("ran 3 tests\n0.5\n", 0), 0.5);
  assert.deepEqual(parseRewardOutput('{"value": -1}', 0), -1);
  assert.deepEqual(parseRewardOutput("FAILED", 1), 0);
  assert.deepEqual(parseRewardOutput("", 0), 1);

  const root = await Deno.makeTempDir();
  const backend = new LocalBackend({
    root,
    rewardFunctions: { twice: (ctx) => ctx.exit_code === 0 ? 2 : 0 },
  });
  const byCommand = await (await backend.start(spec(rollout(
    "w1",
    command(["true"], {
      reward: {
        command: ["sh", "-c", 'test "$(cat "$REINS_INPUT_FILE")" = \'{"q":1}\' && echo 0.25'],
      },
    }),
  )))).done;
  assert.deepEqual([byCommand.status, byCommand.reward], ["succeeded", 0.25]);
  const byFunction = await (await backend.start(spec(rollout(
    "w2",
    command(["true"], {
      reward: { function: "twice" },
    }),
  )))).done;
  assert.deepEqual(byFunction.reward, 2);
  const broken = await (await backend.start(spec(rollout(
    "w3",
    command(["true"], {
      reward: { function: "missing" },
    }),
  )))).done;
  assert.deepEqual(broken.status, "failed");
  assert.match(broken.error ?? "", /reward function "missing" is not registered/);
  await Deno.remove(root, { recursive: true });
});

Deno.test("local backend: a restarted backend adopts a live process and reports a dead one", async () => {
  const root = await Deno.makeTempDir();
  const first = new LocalBackend({ root, pollMs: 20 });
  const live = spec(rollout("p1", command(["sh", "-c", "sleep 0.6; echo done"])));
  const dead = spec(rollout("p2", command(["sh", "-c", "exit 4"])));
  const liveHandle = await first.start(live);
  await (await first.start(dead)).done;
  // A second backend over the same root stands for the controller after a restart.
  const second = new LocalBackend({ root, pollMs: 20 });
  assert.deepEqual((await second.known()).map((k) => k.attempt_id).sort(), ["p1-a1", "p2-a1"]);
  const logs: LogChunk[] = [];
  const adopted = await second.adopt({ ...live, log: (c) => logs.push(c) }) as AttemptHandle;
  assert.ok("done" in adopted, "the live process is adopted");
  const reported = await second.adopt(dead) as AttemptOutcome;
  assert.deepEqual([reported.status, reported.exit_code], ["failed", 4]);
  const [a, b] = await Promise.all([adopted.done, liveHandle.done]);
  assert.deepEqual(a.status, "succeeded");
  assert.deepEqual(b.status, "succeeded");
  assert.deepEqual(logs.map((l) => l.text).join(""), "done\n");
  await Deno.remove(root, { recursive: true });
});

Deno.test("local backend: with no controller alive, the attempt still ends at its deadline", async () => {
  const root = await Deno.makeTempDir();
  const first = new LocalBackend({ root, pollMs: 20 });
  const s = spec(rollout("orphan", { ...command(["sleep", "60"]), timeout_s: 0.4 }));
  const handle = await first.start(s);
  const pid = Number(handle.info.pid);
  await first.close(); // the controller goes away; the attempt is left to its watchdog
  await new Promise((r) => setTimeout(r, 900));
  assert.equal(liveMembers(pid), 0, "the whole process group is gone");
  const second = new LocalBackend({ root, pollMs: 20 });
  const outcome = await second.adopt(s) as AttemptOutcome;
  assert.equal(outcome.status, "timeout");
  assert.match(outcome.error ?? "", /watchdog/);
  await Deno.remove(root, { recursive: true });
});
