/**
 * The environments' datasets, tools and reward functions: right answers get 1, wrong ones 0,
 * bad input fails with an error naming the field, and the shipped datasets are exactly what
 * the seeded generator writes.
 */
import assert from "node:assert/strict";
import { envDataFiles } from "../scripts/make_env_data.ts";
import type { RewardContext } from "../lib/controller/reward_hooks.ts";
import { evaluateExpression, formatNumber } from "../lib/harness/calculator.ts";
import {
  arithmeticEnv,
  arithmeticMatch,
  calculatorTool,
  DEFAULT_DATA_DIR,
  filesEnv,
  fileTools,
  materializeWorkspace,
  normalizeAnswer,
  parseEnvInput,
  readJsonl,
  searchCorpus,
  searchEnv,
  searchMatch,
  searchTool,
  verifyFileTask,
  workspacePath,
} from "../lib/harness/envs/mod.ts";
import type { JsonValue, Rollout } from "../lib/schema.ts";
import { ArithmeticTaskSchema } from "../lib/harness/schema.ts";
import { runningRollout } from "./support/records.ts";

function ctx(input: JsonValue, dir: string): RewardContext {
  const rollout: Rollout = runningRollout({ rollout_id: "r", group_id: "g", input });
  return { rollout, attempt_id: "a", dir, exit_code: 0, edited: [] };
}

async function withDir<T>(fn: (dir: string) => Promise<T>): Promise<T> {
  const dir = await Deno.makeTempDir({ prefix: "reins-env-" });
  try {
    return await fn(dir);
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
}

Deno.test("datasets: the shipped files are byte-for-byte what the seeded generator writes", async () => {
  const files = envDataFiles(7);
  assert.ok(Object.keys(files).length >= 15);
  for (const [path, content] of Object.entries(files)) {
    assert.equal(await Deno.readTextFile(`${DEFAULT_DATA_DIR}/${path}`), content, path);
  }
  // Another seed gives other tasks.
  assert.notEqual(envDataFiles(8)["arithmetic/tasks.jsonl"], files["arithmetic/tasks.jsonl"]);
});

Deno.test("arithmetic: every task's answer is its expression's value; the reward is exact match", async () => {
  const env = arithmeticEnv();
  const tasks = env.loadTasks();
  assert.equal(tasks.length, 200);
  for (const t of tasks) {
    assert.equal(formatNumber(evaluateExpression(t.expression)), t.answer, t.id);
    assert.ok(t.steps >= 2 && t.steps <= 6, `${t.id} has ${t.steps} operators`);
  }
  assert.equal(new Set(tasks.map((t) => t.id)).size, tasks.length);
  const task = tasks[1];
  assert.equal(calculatorTool.run({ expression: task.expression }), task.answer);
  assert.match(String(calculatorTool.run({ expression: "1 / 0" })), /^error: division by zero/);
  await withDir(async (dir) => {
    const input = env.taskInput(task);
    assert.equal(JSON.stringify(input).includes(`"${task.answer}"`), false, "no answer leak");
    assert.equal(await env.reward(ctx(input, dir)), 0, "no answer file");
    await Deno.writeTextFile(`${dir}/answer.txt`, `${task.answer}\n`);
    assert.equal(await env.reward(ctx(input, dir)), 1);
    await Deno.writeTextFile(`${dir}/answer.txt`, `${Number(task.answer) + 1}\n`);
    assert.equal(await env.reward(ctx(input, dir)), 0);
  });
  assert.ok(arithmeticMatch("1,234.", "1234"));
  assert.ok(!arithmeticMatch("about 1234", "1234"));
});

Deno.test("search: BM25 finds each question's first supporting document; normalised exact match", async () => {
  const env = searchEnv();
  const tasks = env.loadTasks();
  const { docs, index } = searchCorpus();
  let hitsAt3 = 0;
  for (const task of tasks) {
    const query = task.question.replace(/^.* of /, "").replace("?", "");
    const hits = index.search(query, 3).map((h) => docs[h.index].id);
    if (hits.includes(task.support[0])) hitsAt3++;
  }
  // The country name alone retrieves the country's page for every question.
  assert.equal(hitsAt3, tasks.length);
  const tool = searchTool();
  const out = String(tool.run({ query: "capital of Kaquatin" }));
  assert.match(out, /^\[doc-\d+\] /);
  assert.equal(out.split("\n").length, 3);
  assert.equal(tool.run({ query: "zzzz qqqq" }), "no results");
  const task = tasks.find((t) => t.aliases.length > 0)!;
  assert.ok(searchMatch(`  The ${task.answer}. `, task));
  assert.ok(searchMatch(task.aliases[0].toUpperCase(), task));
  assert.ok(!searchMatch(`${task.answer} Jr`, task));
  assert.equal(normalizeAnswer("The  Pelfen!"), "pelfen");
  assert.equal(normalizeAnswer("-3.5"), "-3.5");
  await withDir(async (dir) => {
    const input = env.taskInput(task);
    await Deno.writeTextFile(`${dir}/answer.txt`, task.answer);
    assert.equal(await env.reward(ctx(input, dir)), 1);
    await Deno.writeTextFile(`${dir}/answer.txt`, "Nobody");
    assert.equal(await env.reward(ctx(input, dir)), 0);
  });
});

Deno.test("files: the verifier accepts the instruction carried out and rejects the rest", async () => {
  const env = filesEnv();
  const tasks = env.loadTasks();
  assert.equal(tasks.length, 40);
  await withDir(async (root) => {
    for (const task of tasks.slice(0, 5)) {
      const pristine = materializeWorkspace(task, `${root}/ws`);
      assert.equal(materializeWorkspace(task, `${root}/ws`), pristine, "materialised once");
      const dir = `${root}/${task.id}`;
      await Deno.mkdir(dir);
      const cp = await new Deno.Command("cp", { args: ["-a", `${pristine}/.`, dir] }).output();
      assert.ok(cp.success);
      const input = env.taskInput(task);
      assert.equal(await env.reward(ctx(input, dir)), 0, `${task.id}: nothing done yet`);
      // Carry out the instruction with the agent's own tools.
      const tools = Object.fromEntries(
        fileTools({ workdir: dir, input: {} }).map((t) => [t.name, t]),
      );
      for (const check of task.checks) {
        if (check.kind === "equals") {
          await tools.write_file.run({ path: check.path, content: check.content });
        } else if (check.kind === "absent") {
          await tools.delete_file.run({ path: check.path });
        }
      }
      assert.deepEqual(verifyFileTask(task, dir), []);
      assert.equal(await env.reward(ctx(input, dir)), 1, task.id);
      // Touching a file that must stay unchanged, or a wrong content, fails.
      const unchanged = task.checks.find((c) => c.kind === "unchanged");
      const equals = task.checks.find((c) => c.kind === "equals");
      if (unchanged) {
        await Deno.writeTextFile(`${dir}/${unchanged.path}`, "edited\n");
      } else if (equals) {
        await Deno.writeTextFile(`${dir}/${equals.path}`, "wrong\n");
      }
      assert.equal(await env.reward(ctx(input, dir)), 0, `${task.id} spoiled`);
    }
  });
});

Deno.test("workspace tools: paths stay inside the workspace; errors name the argument", async () => {
  await withDir(async (dir) => {
    const tools = Object.fromEntries(
      fileTools({ workdir: dir, input: {} }).map((t) => [t.name, t]),
    );
    assert.throws(() => workspacePath(dir, "../etc/passwd"), /argument "path" must be a relative/);
    assert.throws(() => workspacePath(dir, "/etc/passwd"), /argument "path"/);
    await assert.rejects(
      async () => await tools.read_file.run({}),
      /argument "path" must be a string/,
    );
    await tools.write_file.run({ path: "a/b.txt", content: "x = 1\nx = 1\n" });
    assert.equal(await tools.list_files.run({}), "a/\na/b.txt");
    await assert.rejects(
      async () => await tools.edit_file.run({ path: "a/b.txt", old_text: "x = 1", new_text: "y" }),
      /must occur exactly once in the file \(found 2\)/,
    );
    await tools.edit_file.run({ path: "a/b.txt", old_text: "x = 1\nx", new_text: "y = 2\nx" });
    assert.equal(await tools.read_file.run({ path: "a/b.txt" }), "y = 2\nx = 1\n");
  });
});

Deno.test("bad input: errors name the field", async () => {
  assert.throws(() => parseEnvInput({ env: "search", id: "x", prompt: "q" }, "arithmetic"), {
    message: /input\.env: expected "arithmetic", got "search"/,
  });
  assert.throws(() => parseEnvInput({ env: "arithmetic", prompt: "q" }, "arithmetic"), {
    message: /input\.id/,
  });
  assert.throws(() => arithmeticEnv().task("nope"), {
    message: /input\.id: no arithmetic task "nope"/,
  });
  await withDir(async (dir) => {
    const path = `${dir}/tasks.jsonl`;
    await Deno.writeTextFile(
      path,
      '{"id":"a","question":"q","expression":"1+1","answer":"2","steps":1}\n{"id":"b"}\n',
    );
    assert.throws(() => readJsonl(path, ArithmeticTaskSchema), {
      message: new RegExp(`${path}:2\\.question`),
    });
    await Deno.writeTextFile(`${dir}/bad.jsonl`, "{nope\n");
    assert.throws(() => readJsonl(`${dir}/bad.jsonl`, ArithmeticTaskSchema), {
      message: /:1: not JSON/,
    });
  });
  const env = arithmeticEnv();
  await withDir(async (dir) => {
    await assert.rejects(
      async () => await env.reward(ctx({ env: "arithmetic", id: "missing", prompt: "q" }, dir)),
      /input\.id: no arithmetic task "missing"/,
    );
  });
});
