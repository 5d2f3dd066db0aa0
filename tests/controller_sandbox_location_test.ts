/**
 * The sandbox works wherever the checkout lives. bubblewrap gives the sandboxed process a
 * private /tmp, so a checkout under /tmp used to vanish inside (`Module not found
 * .../lib/controller/sandbox_entry.ts`). These tests copy the checkout under /tmp and run
 * sandboxed attempts from the copy, and check that a path the command needs but cannot see is
 * refused before the attempt starts, with the path and the reason.
 */
import assert from "node:assert/strict";
import { LocalBackend } from "../lib/controller/local_backend.ts";
import { SpecError } from "../lib/controller/backend.ts";
import { probeSandbox, REINS_SOURCE_ROOT } from "../lib/controller/sandbox.ts";
import { sourceMounts } from "../lib/controller/sandbox_mounts.ts";
import { runningAttempt, runningRollout } from "./support/records.ts";

const support = await probeSandbox();
const ROOT = REINS_SOURCE_ROOT!;

/** What the located fixture needs from the checkout (node_modules is linked, not copied). */
const COPIED = [
  "deno.json",
  "deno.lock",
  "lib",
  "data/envs/arithmetic",
  "data/tokenizers",
  "tests/fixtures/controller",
  "tests/support",
  "tests/proxy_helpers.ts",
];

async function copyCheckout(): Promise<string> {
  const dir = await Deno.makeTempDir({ dir: "/tmp", prefix: "reins-located-" });
  for (const path of COPIED) {
    const target = `${dir}/${path}`;
    await Deno.mkdir(target.slice(0, target.lastIndexOf("/")), { recursive: true });
    const out = await new Deno.Command("cp", { args: ["-r", `${ROOT}/${path}`, target] }).output();
    assert.ok(out.success, `copy ${path}`);
  }
  await Deno.symlink(`${ROOT}/node_modules`, `${dir}/node_modules`);
  return dir;
}

Deno.test({
  name: "sandbox: a checkout under /tmp runs strict sandboxed attempts (entry point, source, " +
    "built-in harness)",
  ignore: !support.bwrap || !support.net,
  async fn() {
    const checkout = await copyCheckout();
    try {
      const out = await new Deno.Command(Deno.execPath(), {
        args: [
          "run",
          "-A",
          "--no-lock",
          `--config=${checkout}/deno.json`,
          `${checkout}/tests/fixtures/controller/located_attempts.ts`,
        ],
        cwd: checkout,
        stdout: "piped",
        stderr: "piped",
      }).output();
      const stdout = new TextDecoder().decode(out.stdout);
      const stderr = new TextDecoder().decode(out.stderr);
      assert.ok(out.success, `fixture failed:\n${stderr}\n${stdout}`);
      const report = JSON.parse(stdout.trim().split("\n").at(-1)!);
      assert.equal(report.checkout, checkout);
      const [probe, builtin] = report.rollouts;
      const detail = (r: unknown) => JSON.stringify(r, null, 1);
      assert.equal(probe.status, "succeeded", detail(probe));
      assert.doesNotMatch(probe.output, /Module not found/);
      const seen = JSON.parse(probe.output.split("\n").find((l: string) => l.startsWith("{")));
      assert.match(seen.proxy, /^(200|401|404) /, "the proxy is reached through the entry point");
      assert.match(seen.internet, /^error/);
      assert.equal(builtin.status, "succeeded", detail(builtin));
      assert.equal(builtin.reward, 1, detail(builtin));
      const stages = builtin.attempts[0].info.sandbox_stages;
      assert.ok(stages.applied.includes("before:network_proxy_only"), detail(stages));
      assert.ok(stages.applied.includes("before:hide_paths"), detail(stages));
      assert.deepEqual(stages.skipped, {});
    } finally {
      await Deno.remove(checkout, { recursive: true });
    }
  },
});

Deno.test("sandbox mounts: what lies under /tmp is bound back, nested paths once, own dirs never", async () => {
  const dir = await Deno.makeTempDir({ dir: "/tmp", prefix: "reins-mounts-" });
  await Deno.mkdir(`${dir}/src/lib`, { recursive: true });
  await Deno.writeTextFile(`${dir}/src/lib/main.ts`, "");
  await Deno.mkdir(`${dir}/cache`);
  await Deno.mkdir(`${dir}/work`);
  await Deno.writeTextFile(`${dir}/work/run.sh`, "");
  const mounts = sourceMounts({
    argv: ["/bin/sh", `${dir}/src/lib/main.ts`, `--cache-dir=${dir}/cache`, `${dir}/work/run.sh`],
    env: { DENO_DIR: `${dir}/cache` },
    own: [`${dir}/work`],
    sourceRoot: `${dir}/src`,
    extra: [],
  });
  assert.deepEqual(mounts.binds, [`${dir}/src`, `${dir}/cache`]);
  assert.deepEqual(mounts.needed, ["/bin/sh", `${dir}/src/lib/main.ts`, `${dir}/cache`]);
  // A checkout elsewhere needs no extra mount: the host root is visible read-only.
  const elsewhere = sourceMounts({
    argv: ["/bin/sh"],
    env: {},
    own: [],
    sourceRoot: "/usr",
    extra: [],
  });
  assert.deepEqual(elsewhere.binds, []);
  // A top-level symlink of the source tree that leads out of it (a node_modules linked from
  // another checkout under /tmp) is bound too: inside, the link points there.
  await Deno.mkdir(`${dir}/other/node_modules`, { recursive: true });
  await Deno.symlink(`${dir}/other/node_modules`, `${dir}/src/node_modules`);
  const linked = sourceMounts({ argv: [], env: {}, own: [], sourceRoot: `${dir}/src`, extra: [] });
  assert.deepEqual(linked.binds, [`${dir}/src`, `${dir}/other/node_modules`]);
  await Deno.remove(dir, { recursive: true });
});

Deno.test({
  name: "sandbox: a needed path hidden from the agent is refused up front, naming path and cause",
  ignore: !support.bwrap,
  async fn() {
    const root = await Deno.makeTempDir();
    const data = `/var/tmp/reins-needed-${crypto.randomUUID()}`;
    await Deno.mkdir(data, { recursive: true });
    await Deno.writeTextFile(`${data}/agent.sh`, "echo hi\n");
    const backend = new LocalBackend({ root, pollMs: 20 });
    const rollout = runningRollout({
      rollout_id: "nd1",
      input: {},
      config: {
        timeout_s: 30,
        max_attempts: 1,
        harness: {
          name: "command",
          options: {
            command: ["sh", `${data}/agent.sh`],
            sandbox: { enabled: true, network: "host", hide: [data] },
          },
        },
      },
      version: 2,
    });
    await assert.rejects(
      () =>
        backend.start({
          rollout,
          attempt: runningAttempt({ attempt_id: "nd1-a1", rollout_id: "nd1" }),
          token: "rk",
          gatewayUrl: "http://127.0.0.1:9",
          log: () => {},
        }),
      (e: Error) =>
        e instanceof SpecError &&
        e.message.includes(`${data}/agent.sh: it is hidden by the sandbox's hide list (${data})`),
    );
    await Deno.remove(root, { recursive: true });
    await Deno.remove(data, { recursive: true });
  },
});
