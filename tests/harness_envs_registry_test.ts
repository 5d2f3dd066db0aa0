/**
 * The harness registry: every name a rollout may use, the reward functions they name, and
 * clear errors for unknown names and bad specs.
 */
import assert from "node:assert/strict";
import { SpecError } from "../lib/controller/backend.ts";
import { LocalBackend, resolveLocalHarness } from "../lib/controller/local_backend.ts";
import { BUILTIN_MAIN } from "../lib/harness/builtin/resolver.ts";
import { CLI_HARNESSES } from "../lib/harness/cli/mod.ts";
import {
  harnessRegistry,
  lookupHarness,
  lookupReward,
  UnknownHarnessError,
} from "../lib/harness/registry.ts";
import type { JsonObject, JsonValue, Rollout } from "../lib/schema.ts";
import { runningRollout } from "./support/records.ts";

function rollout(name: string, options: JsonObject, input: JsonValue): Rollout {
  return runningRollout({
    rollout_id: "r1",
    input,
    config: { timeout_s: 30, max_attempts: 1, harness: { name, options } },
  });
}

const registry = harnessRegistry();
const { envs } = registry;

Deno.test("registry: built-in harness per environment, the real CLIs, and reward functions", () => {
  const names = Object.keys(registry.harnesses).sort();
  for (
    const name of [
      "builtin",
      "builtin-arithmetic",
      "builtin-search",
      "builtin-files",
      "builtin-coding",
      ...Object.keys(CLI_HARNESSES),
    ]
  ) {
    assert.ok(names.includes(name), `${name} in ${names}`);
  }
  // The four real CLIs of docs/architecture.md#harnesses.
  assert.equal(Object.keys(CLI_HARNESSES).length, 4);
  assert.deepEqual(Object.keys(registry.rewardFunctions).sort(), [
    "arithmetic",
    "coding",
    "files",
    "search",
  ]);
});

Deno.test("registry: unknown harness and reward names fail listing what exists", async () => {
  assert.throws(() => lookupHarness(registry, "builtin-chess"), (e: Error) => {
    assert.ok(e instanceof UnknownHarnessError);
    assert.equal(e.field, "config.harness.name");
    assert.match(e.message, /unknown harness "builtin-chess" \(known: .*builtin-arithmetic/);
    assert.match(e.message, /command/);
    for (const cli of Object.keys(CLI_HARNESSES)) assert.ok(e.message.includes(cli), cli);
    return true;
  });
  assert.throws(
    () => lookupReward(registry, "chess"),
    /reward\.function: unknown reward function "chess" \(known: arithmetic, coding, files, search\)/,
  );
  // The controller's local backend gives the same answer for a rollout naming it.
  const root = await Deno.makeTempDir();
  try {
    const backend = new LocalBackend({ root, harnesses: registry.harnesses });
    await assert.rejects(
      () =>
        backend.start({
          rollout: rollout("builtin-chess", {}, {}),
          attempt: {
            attempt_id: "a1",
            rollout_id: "r1",
            index: 1,
            status: "running",
            started_at: 0,
            ended_at: null,
            exit_code: null,
            error: null,
            worker: "t",
            lease_expires_at: null,
            log_location: null,
            info: {},
          },
          token: "rk",
          gatewayUrl: "http://127.0.0.1:9",
          log: () => {},
        }),
      (e: Error) => e instanceof SpecError && /known: .*builtin-search/.test(e.message),
    );
  } finally {
    await Deno.remove(root, { recursive: true });
  }
});

Deno.test("registry: builtin-<env> resolves to the harness command, its reward and sandbox", () => {
  const task = envs.coding.loadTasks()[0];
  const coding = resolveLocalHarness(
    rollout(
      "builtin-coding",
      { max_turns: 20, compaction: { max_chars: 4000 } },
      envs.coding.taskInput(task),
    ),
    registry.harnesses,
  );
  assert.ok(coding.command.includes(BUILTIN_MAIN));
  const options = JSON.parse(coding.command.at(-1)!);
  assert.equal(options.env, "coding");
  assert.equal(options.max_turns, 20);
  assert.equal(options.compaction.max_chars, 4000);
  assert.equal(coding.workspace, `${envs.coding.dataDir}/coding/repos/${task.repo}`);
  assert.deepEqual(coding.reward?.restore, ["tests"]);
  assert.equal(coding.reward?.edited_restore_reward, 0);
  assert.equal(coding.reward?.function, "coding");
  assert.equal(coding.sandbox.enabled, true);
  assert.equal(coding.sandbox.network, "proxy_only");
  const unsandboxed = resolveLocalHarness(
    rollout("builtin-coding", { sandbox: { enabled: false } }, envs.coding.taskInput(task)),
    registry.harnesses,
  );
  assert.equal(unsandboxed.sandbox.enabled, false);

  const fileTask = envs.files.loadTasks()[3];
  const files = resolveLocalHarness(
    rollout("builtin-files", {}, envs.files.taskInput(fileTask)),
    registry.harnesses,
  );
  for (const [path, content] of Object.entries(fileTask.files)) {
    assert.equal(Deno.readTextFileSync(`${files.workspace}/${path}`), content);
  }
  assert.equal(files.sandbox.enabled, false);

  const plain = resolveLocalHarness(rollout("builtin", {}, { prompt: "hi" }), registry.harnesses);
  assert.equal(JSON.parse(plain.command.at(-1)!).env, "none");
  assert.equal(plain.reward, undefined);
});

Deno.test("registry: bad options and inputs of builtin-<env> name the field", () => {
  const input = envs.arithmetic.taskInput(envs.arithmetic.loadTasks()[0]);
  const resolve = (name: string, options: JsonObject, value: JsonValue) => () =>
    resolveLocalHarness(rollout(name, options, value), registry.harnesses);
  assert.throws(
    resolve("builtin-arithmetic", { max_turns: 0 }, input),
    /config\.harness\.options\.max_turns/,
  );
  assert.throws(
    resolve("builtin-arithmetic", { compaction: { max_chars: "big" } }, input),
    /config\.harness\.options\.compaction\.max_chars/,
  );
  assert.throws(resolve("builtin-search", {}, input), /input\.env: expected "search"/);
  assert.throws(
    resolve("builtin-arithmetic", {}, { ...input, id: "arith-9999" }),
    /input\.id: no arithmetic task "arith-9999"/,
  );
  assert.throws(resolve("builtin-arithmetic", {}, { question: "2+2" }), /input\.(env|id|prompt)/);
});
