/**
 * In-process attempts of the local backend: a registered runner behaves like a harness
 * process (exit status, logs per attempt, timeout, kill, reward hook), is refused with the
 * sandbox, and dies with its controller: a restarted controller reports it lost and retries,
 * and so does the gateway's lease expiry.
 */
import assert from "node:assert/strict";
import type { AttemptHandle, AttemptOutcome, LogChunk } from "../lib/controller/backend.ts";
import { SpecError } from "../lib/controller/backend.ts";
import type { InProcessAttempt, InProcessRunner } from "../lib/controller/in_process.ts";
import { LocalBackend } from "../lib/controller/local_backend.ts";
import { Reconciler } from "../lib/controller/reconciler.ts";
import { GatewayClient } from "../lib/gateway/client.ts";
import { startGateway } from "../lib/gateway/server.ts";
import { harnessRegistry } from "../lib/harness/registry.ts";
import type { JsonObject, Rollout } from "../lib/schema.ts";
import { backendRollout, backendSpec } from "./support/records.ts";
import { waitFor } from "./support/wait.ts";

const rollout = backendRollout;
const spec = backendSpec;

/** A `command` harness whose runner is the in-process `name`. */
function inProcess(name: string, options: JsonObject = {}, extra: JsonObject = {}) {
  return {
    harness: {
      name: "command",
      options: {
        command: ["false"], // never run: the in-process runner is
        runner: "in_process",
        in_process: { name, options },
        ...extra,
      },
    },
  };
}

const text = (logs: LogChunk[], stream: string) =>
  logs.filter((l) => l.stream === stream).map((l) => l.text).join("");

/** Resolves when `signal` aborts (a runner that waits for its end). */
const aborted = (signal: AbortSignal) =>
  new Promise<void>((resolve) => signal.addEventListener("abort", () => resolve()));

Deno.test("in-process: status 0 succeeds with the process's environment; output is kept per attempt", async () => {
  const root = await Deno.makeTempDir();
  const seen: InProcessAttempt[] = [];
  const echo: InProcessRunner = async (a) => {
    seen.push(a);
    a.stdout(`${a.env.OPENAI_BASE_URL}|${a.env.OPENAI_API_KEY}|${a.env.REINS_ROLLOUT_ID}\n`);
    a.stdout(`${JSON.stringify(a.input)}|${a.options.greeting}|${a.env.EXTRA}\n`);
    await Deno.writeTextFile(`${a.workdir}/answer.txt`, "42\n");
    a.stderr("progress\n");
    return 0;
  };
  const backend = new LocalBackend({
    root,
    pollMs: 20,
    inProcess: { echo },
    rewardFunctions: {
      answer: async (ctx) => Number((await Deno.readTextFile(`${ctx.dir}/answer.txt`)).trim()),
    },
  });
  const logs: LogChunk[] = [];
  const r = rollout(
    "ip1",
    inProcess("echo", { greeting: "hi" }, {
      env: { EXTRA: "x" },
      reward: { function: "answer" },
    }),
  );
  const handle = await backend.start(spec(r, logs));
  assert.equal(handle.info.runner, "in_process");
  assert.equal(handle.info.pid, Deno.pid, "it runs in this process");
  const outcome = await handle.done;
  assert.equal(outcome.status, "succeeded", outcome.error ?? "");
  assert.equal(outcome.exit_code, 0);
  assert.equal(outcome.reward, 42, "the reward hook ran on the workdir it left");
  assert.equal(outcome.info.runner, "in_process");
  assert.equal(
    text(logs, "stdout"),
    "http://127.0.0.1:9/proxy/ip1/ip1-a1/v1|rk_test|ip1\n" + '{"q":1}|hi|x\n',
  );
  assert.equal(text(logs, "stderr"), "progress\n");
  assert.equal(seen[0].workdir, `${root}/attempts/ip1-a1/work`);
  // Nothing of the controller's own environment is handed over, only what a process is given.
  assert.equal(seen[0].env.PATH, undefined);
  assert.equal(seen[0].env.REINS_INPUT_FILE, `${root}/attempts/ip1-a1/input.json`);
  await backend.release("ip1-a1");
  assert.deepEqual(await backend.known(), []);
  await Deno.remove(root, { recursive: true });
});

Deno.test("in-process: a non-zero status fails; a throw is status 1 with its stack on stderr", async () => {
  const root = await Deno.makeTempDir();
  const backend = new LocalBackend({
    root,
    pollMs: 20,
    inProcess: {
      three: () => Promise.resolve(3),
      boom: () => Promise.reject(new Error("kaboom")),
    },
  });
  const failed = await (await backend.start(spec(rollout("f1", inProcess("three"))))).done;
  assert.deepEqual([failed.status, failed.exit_code], ["failed", 3]);
  assert.equal(failed.error, "in-process harness ended with status 3");
  const logs: LogChunk[] = [];
  const thrown = await (await backend.start(spec(rollout("f2", inProcess("boom")), logs))).done;
  assert.deepEqual([thrown.status, thrown.exit_code], ["failed", 1]);
  assert.match(text(logs, "stderr"), /Error: kaboom\n\s+at /);
  await Deno.remove(root, { recursive: true });
});

Deno.test("in-process: a timeout aborts the runner and ends the attempt; later output is dropped", async () => {
  const root = await Deno.makeTempDir();
  let signal: AbortSignal | null = null;
  let late: () => void = () => {};
  const hang: InProcessRunner = async (a) => {
    signal = a.signal;
    a.stdout("working\n");
    await aborted(a.signal);
    late = () => a.stdout("after the end\n");
    return 0; // a status after the abort changes nothing
  };
  const backend = new LocalBackend({ root, pollMs: 20, inProcess: { hang } });
  const logs: LogChunk[] = [];
  const t0 = Date.now();
  const r = rollout("t1", { ...inProcess("hang"), timeout_s: 0.3 });
  const outcome = await (await backend.start(spec(r, logs))).done;
  assert.equal(outcome.status, "timeout");
  assert.equal(outcome.error, "timed out after 0.3s");
  assert.ok(Date.now() - t0 < 5000, "the timeout ended the attempt promptly");
  assert.equal(signal!.aborted, true, "the runner was told to stop");
  late();
  await new Promise((r) => setTimeout(r, 50));
  assert.equal(text(logs, "stdout"), "working\n");
  assert.equal(await Deno.readTextFile(`${root}/attempts/t1-a1/stdout.log`), "working\n");
  await assert.rejects(() => Deno.stat(`${root}/attempts/t1-a1/exit_code`), Deno.errors.NotFound);
  await Deno.remove(root, { recursive: true });
});

Deno.test("in-process: kill ends the attempt with the status asked for and aborts the runner", async () => {
  const root = await Deno.makeTempDir();
  let signal: AbortSignal | null = null;
  const backend = new LocalBackend({
    root,
    pollMs: 20,
    inProcess: {
      hang: async (a) => {
        signal = a.signal;
        await aborted(a.signal);
        return 0;
      },
    },
  });
  const handle = await backend.start(spec(rollout("k1", inProcess("hang"))));
  await backend.kill("k1-a1", "cancelled", "the gateway cancelled it");
  const outcome = await handle.done;
  assert.deepEqual([outcome.status, outcome.error], ["cancelled", "the gateway cancelled it"]);
  assert.equal(signal!.aborted, true);
  await Deno.remove(root, { recursive: true });
});

Deno.test("in-process: refused with the sandbox and for unknown runners, naming the field", async () => {
  const root = await Deno.makeTempDir();
  const backend = new LocalBackend({ root, inProcess: { ok: () => Promise.resolve(0) } });
  await assert.rejects(
    () => backend.start(spec(rollout("s1", inProcess("ok", {}, { sandbox: { enabled: true } })))),
    (e: Error) =>
      e instanceof SpecError && e.field === "config.harness.options.runner" &&
      /not sandboxed/.test(e.message),
  );
  await assert.rejects(
    () => backend.start(spec(rollout("s2", inProcess("missing")))),
    (e: Error) =>
      e instanceof SpecError && e.field === "config.harness.options.in_process.name" &&
      /registered: ok/.test(e.message),
  );
  await assert.rejects(
    () =>
      backend.start(spec(rollout("s3", {
        harness: { name: "command", options: { command: ["true"], runner: "in_process" } },
      }))),
    (e: Error) => e instanceof SpecError && e.field === "config.harness.options.in_process",
  );
  // The built-in harness: only environments whose tools run no agent-written code.
  const registry = harnessRegistry();
  const builtin = new LocalBackend({
    root,
    harnesses: registry.harnesses,
    inProcess: registry.inProcess,
  });
  for (const env of ["coding", "files"]) {
    await assert.rejects(
      () =>
        builtin.start(spec(rollout(`s-${env}`, {
          harness: { name: `builtin-${env}`, options: { runner: "in_process" } },
        }, { env, id: "x", prompt: "p", extra: {} }))),
      (e: Error) =>
        e instanceof SpecError && e.field === "config.harness.options.runner" &&
        e.message.includes(`refused for the ${env} environment`),
      env,
    );
  }
  // Nothing was started: no attempt directory holds state.
  assert.deepEqual(await backend.known(), []);
  await Deno.remove(root, { recursive: true });
});

Deno.test("in-process: a backend created later in the same process re-adopts the running attempt", async () => {
  const root = await Deno.makeTempDir();
  let release: () => void = () => {};
  const gate = new Promise<void>((r) => release = r);
  const runners = {
    gated: async (a: InProcessAttempt) => {
      a.stdout("before\n");
      await gate;
      a.stdout("after\n");
      return 0;
    },
  };
  const first = new LocalBackend({
    root,
    pollMs: 20,
    inProcess: { ...runners, quick: () => Promise.resolve(5) },
  });
  const s = spec(rollout("a1", inProcess("gated")));
  await first.start(s);
  const quick = spec(rollout("a2", inProcess("quick")));
  await (await first.start(quick)).done;
  await first.close(); // detach: the attempt keeps running in this process
  const second = new LocalBackend({ root, pollMs: 20, inProcess: runners });
  // One ended before the restart: its status is on disk, and reported.
  const ended = await second.adopt(quick) as AttemptOutcome;
  assert.deepEqual([ended.status, ended.exit_code], ["failed", 5]);
  const logs: LogChunk[] = [];
  const adopted = await second.adopt({
    ...s,
    log: (c) => logs.push(c),
    resume: {
      stdout: "before\n".length,
      stderr: 0,
    },
  }) as AttemptHandle;
  assert.ok("done" in adopted, "still running here: adopted");
  assert.equal(adopted.info.adopted, true);
  release();
  const outcome = await adopted.done;
  assert.equal(outcome.status, "succeeded");
  assert.equal(text(logs, "stdout"), "after\n", "the log resumes where the posted one ended");
  await Deno.remove(root, { recursive: true });
});

const FIXTURE = new URL("./fixtures/controller/in_process_controller.ts", import.meta.url)
  .pathname;

/** A controller process with an in-process attempt inside (see the fixture). */
function controllerProcess(url: string, key: string, root: string, leaseMs: number) {
  const child = new Deno.Command(Deno.execPath(), {
    args: ["run", "-A", FIXTURE, url, key, root, "ctl-ip", String(leaseMs)],
    stdout: "null",
    stderr: "null",
  }).spawn();
  return {
    async crash() {
      child.kill("SIGKILL");
      await child.status;
    },
  };
}

async function crashSetup(leaseMs: number) {
  const dir = await Deno.makeTempDir();
  const gw = await startGateway({ db: `${dir}/gateway.db`, leaseSweepMs: 100 });
  const client = new GatewayClient(gw.url, { apiKey: gw.adminKey });
  await client.createRollouts([{
    rollout_id: "crash",
    input: { q: 1 },
    config: { timeout_s: 60, max_attempts: 2, ...inProcess("beat") },
  }]);
  const ctl = controllerProcess(gw.url, gw.adminKey, `${dir}/ctl`, leaseMs);
  // The attempt runs inside the fixture's process and has posted output.
  await waitFor(
    async () => (await client.listEvents("crash", { type: "log" })).length > 0,
    30_000,
    "the in-process attempt's first beats",
  );
  await ctl.crash();
  return { dir, gw, client };
}

/** A controller in this test's process whose `beat` runner finishes at once. */
function restarted(client: GatewayClient, url: string, root: string, worker: string) {
  const lines: string[] = [];
  const loop = new Reconciler(
    client,
    new LocalBackend({
      root,
      pollMs: 20,
      inProcess: {
        beat: (a) => {
          a.stdout("finished\n");
          return Promise.resolve(0);
        },
      },
    }),
    {
      worker,
      concurrency: 2,
      lease_ms: 10_000,
      poll_ms: 20,
      sweep_ms: 100,
      gatewayUrl: url,
      logger: (l) => lines.push(l),
    },
  );
  return { loop, lines };
}

async function settled(client: GatewayClient): Promise<Rollout> {
  return await waitFor(
    async () => {
      const r = await client.getRollout("crash");
      return ["succeeded", "failed"].includes(r.status) && r;
    },
    30_000,
    "the rollout to settle",
  );
}

Deno.test("in-process crash: the restarted controller reports the attempt lost and retries it", async () => {
  const { dir, gw, client } = await crashSetup(30_000);
  const { loop, lines } = restarted(client, gw.url, `${dir}/ctl`, "ctl-ip");
  await loop.start();
  const r = await settled(client);
  await loop.stop("drain");
  assert.deepEqual(r.attempts.map((a) => a.status), ["lost", "succeeded"]);
  assert.match(
    r.attempts[0].error ?? "",
    /in-process attempt ran inside controller process \d+ and left no exit status/,
  );
  assert.ok(lines.some((l) => /crash\/\S+ lost → requeuing/.test(l)), lines.join("\n"));
  await gw.close();
  await Deno.remove(dir, { recursive: true });
});

Deno.test("in-process crash: with no restart, the lease expires and another controller retries it", async () => {
  const { dir, gw, client } = await crashSetup(1_000);
  await waitFor(
    async () => (await client.getRollout("crash")).status === "requeuing",
    15_000,
    "the lease to expire",
  );
  // The same worker id back later: the gateway gave the attempt up, so it is only cleaned up.
  const { loop, lines } = restarted(client, gw.url, `${dir}/ctl`, "ctl-ip");
  await loop.start();
  const r = await settled(client);
  await loop.stop("drain");
  assert.deepEqual(r.attempts.map((a) => a.status), ["lost", "succeeded"]);
  assert.ok(
    lines.some((l) => /stopping crash\/\S+: the gateway no longer runs it here/.test(l)),
    lines.join("\n"),
  );
  await gw.close();
  await Deno.remove(dir, { recursive: true });
});
