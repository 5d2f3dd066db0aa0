import assert from "node:assert/strict";
import { relative } from "node:path";
import type { Attempt, JsonObject, Rollout } from "../lib/schema.ts";
import type { LogChunk } from "../lib/controller/backend.ts";
import { SpecError } from "../lib/controller/backend.ts";
import { LocalBackend } from "../lib/controller/local_backend.ts";
import { probeSandbox } from "../lib/controller/sandbox.ts";
import { runningAttempt, runningRollout } from "./support/records.ts";

const PROBE = new URL("./fixtures/controller/sandbox_probe.ts", import.meta.url).pathname;

function rollout(id: string, options: JsonObject): Rollout {
  return runningRollout({
    rollout_id: id,
    input: { task: "fix the bug" },
    config: { timeout_s: 60, max_attempts: 1, harness: { name: "command", options } },
    version: 2,
  });
}

function attempt(rolloutId: string): Attempt {
  return runningAttempt({ attempt_id: `${rolloutId}-a1`, rollout_id: rolloutId });
}

async function git(cwd: string, ...args: string[]): Promise<void> {
  const out = await new Deno.Command("git", {
    args: ["-c", "user.email=t@t", "-c", "user.name=t", ...args],
    cwd,
    stdout: "null",
    stderr: "piped",
  }).output();
  if (!out.success) throw new Error(new TextDecoder().decode(out.stderr));
}

/** A tiny task repo: the answer sits in git history, the tests check `solution.txt`. */
async function taskRepo(): Promise<string> {
  const repo = await Deno.makeTempDir({ prefix: "reins-task-" });
  await Deno.mkdir(`${repo}/tests`);
  await Deno.writeTextFile(`${repo}/solution.txt`, "42\n");
  await git(repo, "init", "-q");
  await git(repo, "add", ".");
  await git(repo, "commit", "-qm", "the answer is 42");
  await Deno.writeTextFile(`${repo}/solution.txt`, "TODO\n");
  await Deno.writeTextFile(
    `${repo}/tests/check.sh`,
    "grep -qx 42 solution.txt && echo 1 || echo 0\n",
  );
  await git(repo, "add", ".");
  await git(repo, "commit", "-qm", "task");
  return repo;
}

/** A stand-in gateway on a random loopback port, plus another service the agent must not reach. */
function servers() {
  const gateway = Deno.serve(
    { hostname: "127.0.0.1", port: 0, onListen: () => {} },
    (req) => new Response(`gateway saw ${new URL(req.url).pathname}`),
  );
  const other = Deno.serve(
    { hostname: "127.0.0.1", port: 0, onListen: () => {} },
    () => new Response("secret"),
  );
  const allowed = Deno.serve(
    { hostname: "127.0.0.1", port: 0, onListen: () => {} },
    () => new Response("allow-listed"),
  );
  return {
    gatewayUrl: `http://127.0.0.1:${gateway.addr.port}`,
    otherPort: other.addr.port,
    allowedPort: allowed.addr.port,
    async close() {
      await gateway.shutdown();
      await other.shutdown();
      await allowed.shutdown();
    },
  };
}

const support = await probeSandbox();
// The task repos below are real git repos (Debian package `git`; CI installs it).
const hasGit = await new Deno.Command("git", { args: ["--version"], stdout: "null" }).output()
  .then((out) => out.success, () => false);

Deno.test({
  name:
    "sandbox: git and .git are gone, only the proxy is reachable, the reward uses restored tests",
  ignore: !support.bwrap || !support.net || !hasGit,
  async fn() {
    const root = await Deno.makeTempDir();
    const repo = await taskRepo();
    const net = servers();
    const backend = new LocalBackend({ root, pollMs: 20 });
    // The "agent": tries git, looks for .git, probes the network, cheats on the tests, and
    // writes a wrong answer. The verifier must see the pristine tests (and git history).
    const script = [
      "git log --oneline; echo git_rc=$?",
      "/usr/bin/git --version >/dev/null 2>&1; echo abs_git_rc=$?",
      "test -e .git/HEAD && echo dotgit=visible || echo dotgit=hidden",
      `test -e ${repo}/.git/HEAD && echo pristine=visible || echo pristine=hidden`,
      `"${Deno.execPath()}" run --no-config -A ${PROBE}`,
      "echo 'echo 1' > tests/check.sh",
      "echo 41 > solution.txt",
    ].join("\n");
    const logs: LogChunk[] = [];
    const r = rollout("sb1", {
      command: ["bash", "-c", script],
      env: {
        PROBE_OTHER_PORT: String(net.otherPort),
        PROBE_ALLOWED_PORT: String(net.allowedPort),
      },
      workspace: repo,
      sandbox: { enabled: true, strict: true, allow: [`127.0.0.1:${net.allowedPort}`] },
      reward: {
        command: ["sh", "-c", "git log --oneline | wc -l >&2; sh tests/check.sh"],
        restore: ["tests"],
      },
    });
    const handle = await backend.start({
      rollout: r,
      attempt: attempt("sb1"),
      token: "rk_sandbox",
      gatewayUrl: net.gatewayUrl,
      log: (c) => logs.push(c),
    });
    const outcome = await handle.done;
    const stdout = logs.filter((l) => l.stream === "stdout").map((l) => l.text).join("");
    await net.close();
    assert.equal(outcome.status, "succeeded", `${outcome.error}\n${stdout}`);
    assert.match(stdout, /git_rc=128/);
    assert.match(stdout, /abs_git_rc=126/);
    assert.match(stdout, /dotgit=hidden/);
    assert.match(stdout, /pristine=hidden/);
    const probe = JSON.parse(stdout.split("\n").find((l) => l.startsWith("{"))!);
    assert.equal(probe.proxy, "200 gateway saw /proxy/sb1/sb1-a1/v1/models");
    assert.match(probe.other, /^error ConnectionRefused/);
    assert.equal(probe.allowed, "200 allow-listed");
    assert.match(probe.internet, /^error/);
    // The agent rewrote the test to always pass; the verifier ran the restored one.
    assert.equal(outcome.reward, 0);
    const info = outcome.info as Record<string, unknown>;
    assert.deepEqual(info.verification, { restored: ["tests", ".git"], edited: ["tests"] });
    assert.ok((info.flags as string[]).includes("edited_tests"));
    assert.ok((info.flags as string[]).includes("git_attempt"));
    assert.ok((info.commands as string[]).some((c) => c.startsWith("git log")));
    const stages = info.sandbox_stages as { applied: string[]; skipped: object };
    assert.deepEqual(stages.applied, [
      "before:hide_git",
      "before:disable_git",
      "before:network_proxy_only",
      "during:command_log",
      "after:verify_restored",
      "after:verify_outside_sandbox",
    ]);
    assert.deepEqual(stages.skipped, {});
    // The verifier saw git history (two commits) that the agent could not.
    const hook = info.reward_hook as { stderr_tail: string };
    assert.equal(hook.stderr_tail.trim(), "2");
    await backend.release("sb1-a1");
    await Deno.remove(root, { recursive: true });
    await Deno.remove(repo, { recursive: true });
  },
});

Deno.test({
  name: "sandbox: an honest agent is rewarded, and it cannot write outside its tree",
  ignore: !support.bwrap || !hasGit,
  async fn() {
    const root = await Deno.makeTempDir();
    const repo = await taskRepo();
    const backend = new LocalBackend({ root, pollMs: 20 });
    // /var/tmp is on the read-only host root inside (unlike /tmp, a private tmpfs there).
    const outside = `/var/tmp/reins-escape-${crypto.randomUUID()}`;
    const r = rollout("sb2", {
      command: ["sh", "-c", `echo 42 > solution.txt; echo x > ${outside} || echo blocked`],
      workspace: repo,
      sandbox: { enabled: true, network: "host" },
      reward: { command: ["sh", "tests/check.sh"], restore: ["tests"] },
    });
    const logs: LogChunk[] = [];
    const outcome = await (await backend.start({
      rollout: r,
      attempt: attempt("sb2"),
      token: "rk",
      gatewayUrl: "http://127.0.0.1:9",
      log: (c) => logs.push(c),
    })).done;
    assert.equal(outcome.status, "succeeded");
    assert.equal(outcome.reward, 1);
    assert.match(logs.map((l) => l.text).join(""), /blocked/);
    assert.throws(() => Deno.statSync(outside));
    await Deno.remove(root, { recursive: true });
    await Deno.remove(repo, { recursive: true });
  },
});

Deno.test({
  name:
    "sandbox: hidden paths are masked inside (files unreadable, directories empty), not outside",
  ignore: !support.bwrap,
  async fn() {
    const root = await Deno.makeTempDir();
    // Under /var/tmp, which stays visible inside (unlike /tmp, a private tmpfs there).
    const data = `/var/tmp/reins-hide-${crypto.randomUUID()}`;
    await Deno.mkdir(`${data}/answers`, { recursive: true });
    await Deno.writeTextFile(`${data}/tasks.jsonl`, "hidden-test-content\n");
    await Deno.writeTextFile(`${data}/answers/a.txt`, "the-answer\n");
    await Deno.writeTextFile(`${data}/corpus.jsonl`, "public-corpus\n");
    await Deno.symlink(`${data}/tasks.jsonl`, `${data}/link.jsonl`);
    const repo = await Deno.makeTempDir({ prefix: "reins-task-" });
    await Deno.writeTextFile(`${repo}/notes.txt`, "workspace-secret\n");
    const backend = new LocalBackend({ root, pollMs: 20 });
    const script = [
      `cat ${data}/tasks.jsonl; echo "file_rc=$?"`,
      `cat ${data}/link.jsonl; echo "link_rc=$?"`,
      `echo "answers=$(ls ${data}/answers | wc -l)"`,
      `cat ${data}/answers/a.txt 2>/dev/null || echo answer=unreadable`,
      `cat ${data}/corpus.jsonl`,
      "cat notes.txt; echo notes_rc=$?",
      "echo 42 > solution.txt",
    ].join("\n");
    const r = rollout("sb5", {
      command: ["bash", "-c", script],
      workspace: repo,
      sandbox: {
        enabled: true,
        strict: true,
        network: "host",
        hide: [
          relative(Deno.cwd(), `${data}/tasks.jsonl`), // relative to the controller's cwd
          `${data}/answers`,
          `${data}/missing.jsonl`, // nothing to hide: not an error
          `${root}/attempts/sb5-a1/work/notes.txt`, // inside the agent's tree
        ],
      },
      // The reward runs outside the sandbox: it still reads the hidden files.
      reward: {
        command: [
          "sh",
          "-c",
          `grep -q hidden-test ${data}/tasks.jsonl && cat ${data}/answers/a.txt >&2 && echo 1`,
        ],
      },
    });
    const logs: LogChunk[] = [];
    const outcome = await (await backend.start({
      rollout: r,
      attempt: attempt("sb5"),
      token: "rk",
      gatewayUrl: "http://127.0.0.1:9",
      log: (c) => logs.push(c),
    })).done;
    const stdout = logs.filter((l) => l.stream === "stdout").map((l) => l.text).join("");
    assert.equal(outcome.status, "succeeded", `${outcome.error}\n${stdout}`);
    assert.doesNotMatch(stdout, /hidden-test-content|the-answer|workspace-secret/);
    // A file is covered by /dev/null on a nodev mount: reading it fails.
    assert.match(stdout, /^file_rc=[1-9]/m);
    assert.match(stdout, /^link_rc=[1-9]/m);
    assert.match(stdout, /^answers=0$/m);
    assert.match(stdout, /^answer=unreadable$/m);
    assert.match(stdout, /^public-corpus$/m, "what is not hidden stays readable");
    assert.match(stdout, /^notes_rc=[1-9]/m);
    assert.equal(outcome.reward, 1);
    const info = outcome.info as Record<string, unknown>;
    assert.match((info.reward_hook as { stderr_tail: string }).stderr_tail, /the-answer/);
    const stages = info.sandbox_stages as {
      requested: string[];
      applied: string[];
      skipped: object;
    };
    assert.ok(stages.requested.includes("before:hide_paths"));
    assert.deepEqual(stages.applied.slice(0, 3), [
      "before:hide_git",
      "before:disable_git",
      "before:hide_paths",
    ]);
    assert.deepEqual(stages.skipped, {});
    // Host files are untouched.
    assert.equal(await Deno.readTextFile(`${data}/tasks.jsonl`), "hidden-test-content\n");

    // Hiding the agent's own tree cannot be applied: strict refuses, naming the stage.
    const own = rollout("sb6", {
      command: ["true"],
      sandbox: {
        enabled: true,
        strict: true,
        network: "host",
        hide: [`${root}/attempts/sb6-a1/work`],
      },
    });
    await assert.rejects(
      () =>
        backend.start({
          rollout: own,
          attempt: attempt("sb6"),
          token: "rk",
          gatewayUrl: "http://127.0.0.1:9",
          log: () => {},
        }),
      (e: Error) =>
        e instanceof SpecError &&
        /sandbox stage before:hide_paths cannot be applied: .*working directory/.test(e.message),
    );
    await Deno.remove(root, { recursive: true });
    await Deno.remove(repo, { recursive: true });
    await Deno.remove(data, { recursive: true });
  },
});

Deno.test("sandbox: without bubblewrap, strict refuses and non-strict records the skipped stages", async () => {
  const root = await Deno.makeTempDir();
  const backend = new LocalBackend({ root, bwrap: "/nonexistent/bwrap" });
  const strict = rollout("sb3", { command: ["true"], sandbox: { enabled: true, strict: true } });
  await assert.rejects(
    () =>
      backend.start({
        rollout: strict,
        attempt: attempt("sb3"),
        token: "rk",
        gatewayUrl: "http://127.0.0.1:9",
        log: () => {},
      }),
    (e: Error) => e instanceof SpecError && /cannot be applied/.test(e.message),
  );
  const lenient = rollout("sb4", {
    command: ["true"],
    sandbox: { enabled: true, hide: ["/etc/hostname"] },
  });
  const outcome = await (await backend.start({
    rollout: lenient,
    attempt: attempt("sb4"),
    token: "rk",
    gatewayUrl: "http://127.0.0.1:9",
    log: () => {},
  })).done;
  assert.equal(outcome.status, "succeeded");
  const stages = outcome.info.sandbox_stages as { applied: string[]; skipped: object };
  assert.deepEqual(stages.applied, []);
  assert.deepEqual(Object.keys(stages.skipped), [
    "before:hide_git",
    "before:disable_git",
    "before:hide_paths",
    "before:network_proxy_only",
    "during:command_log",
  ]);
  await Deno.remove(root, { recursive: true });
});
