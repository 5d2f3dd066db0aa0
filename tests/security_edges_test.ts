/**
 * Correctness at the edges (issue #29, item 3), each as the attacker or the unlucky operator
 * meets it: search finds any text a rollout holds, ids a URL cannot reach are refused, a
 * corrupted database is named (without the CLI usage), a killed gateway leaves nothing in
 * `/tmp`, a failed start writes no key file and creates no directory, and unknown keys are
 * refused naming them on every body the gateway reads.
 */
import assert from "node:assert/strict";
import { RolloutText } from "../lib/ui/query.ts";
import { ADMIN_KEY, errorOf, withSecurityFixture } from "./support/security.ts";
import { spawnGatewayProcess } from "./support/gateway_process.ts";

const ROOT = new URL("..", import.meta.url).pathname;
const CLI = "bin/gateway.ts";

async function runCli(args: string[]): Promise<{ code: number; stderr: string }> {
  const out = await new Deno.Command(Deno.execPath(), {
    args: ["run", "-A", CLI, ...args],
    cwd: ROOT,
    stdout: "piped",
    stderr: "piped",
    env: { REINS_ADMIN_KEY: "" },
  }).output();
  return { code: out.code, stderr: new TextDecoder().decode(out.stderr) };
}

Deno.test("edges: search finds text holding quotes and backslashes", async () => {
  await withSecurityFixture({}, async (fx) => {
    const { rolloutId, attemptId, token } = await fx.claimOne();
    await fx.admin.createRollouts([{
      rollout_id: "quoted",
      input: { question: 'print("hi")', path: "C:\\temp\\x" },
    }]);
    const res = await fx.send(
      "POST",
      `/v1/rollouts/${rolloutId}/attempts/${attemptId}/events`,
      token,
      {
        events: [{ type: "log", payload: { stream: "stdout", text: 'said "done" in C:\\out' } }],
      },
    );
    assert.equal(res.status, 200);
    const texts = new RolloutText(fx.gateway.store);
    const quoted = (await fx.gateway.store.getRollout("quoted"))!;
    const logged = (await fx.gateway.store.getRollout(rolloutId))!;
    assert.equal(await texts.matches(quoted, 'print("hi")'), true);
    assert.equal(await texts.matches(quoted, "C:\\temp\\x"), true);
    assert.equal(await texts.matches(logged, 'said "done" in C:\\out'), true);
    assert.equal(await texts.matches(logged, '\\"done\\"'), false, "not the JSON escapes");
  });
});

Deno.test("edges: ids '.' and '..' are refused (no URL can reach them); the store is unchanged", async () => {
  await withSecurityFixture({}, async (fx) => {
    const before = await fx.snapshot();
    for (
      const [path, body, field] of [
        ["/v1/rollouts", { rollouts: [{ rollout_id: ".", input: {} }] }, "rollouts[0].rollout_id"],
        ["/v1/rollouts", { rollouts: [{ rollout_id: "..", input: {} }] }, "rollouts[0].rollout_id"],
        ["/v1/rollouts", { rollouts: [{ group_id: "..", input: {} }] }, "rollouts[0].group_id"],
        ["/v1/models", { name: "..", version: 1 }, "name"],
      ] as const
    ) {
      const res = await fx.send("POST", path, ADMIN_KEY, body);
      assert.equal(res.status, 400, JSON.stringify(body));
      assert.match(errorOf(res.body).message, /must not be '\.' or '\.\.'/);
      assert.equal(errorOf(res.body).field, field);
    }
    assert.deepEqual(await fx.snapshot(), before);
    assert.deepEqual(await fx.admin.listModels(), []);
  });
});

Deno.test("edges: unknown keys are refused naming them on every body the gateway reads", async () => {
  await withSecurityFixture({}, async (fx) => {
    const { rolloutId, attemptId, token } = await fx.claimOne();
    const before = await fx.snapshot();
    const cases: Array<[string, string, string, unknown, RegExp]> = [
      // The issue's own case: a model registered with a misspelt `endpoints`.
      [
        "POST",
        "/v1/models",
        ADMIN_KEY,
        { name: "m", version: 1, endpoint: ["http://x"] },
        /endpoint/,
      ],
      ["POST", "/v1/rollouts", ADMIN_KEY, { rollouts: [{ input: {} }], dry_run: true }, /dry_run/],
      ["POST", "/v1/rollouts", ADMIN_KEY, { rollouts: [{ input: {}, lables: {} }] }, /lables/],
      ["POST", "/v1/rollouts/claim", ADMIN_KEY, { worker: "w", limt: 2 }, /limt/],
      ["PATCH", `/v1/rollouts/${rolloutId}`, ADMIN_KEY, { to: "failed", resaon: "x" }, /resaon/],
      [
        "POST",
        `/v1/rollouts/${rolloutId}/attempts/${attemptId}/lease`,
        ADMIN_KEY,
        { worker: "ctl", lease: 5 },
        /lease/,
      ],
      ["POST", "/v1/phase", ADMIN_KEY, { phase: "rollout", drian: true }, /drian/],
      [
        "POST",
        `/v1/rollouts/${rolloutId}/attempts/${attemptId}/events`,
        token,
        { events: [{ type: "log", payload: { stream: "stdout", text: "x", level: 1 } }] },
        /level/,
      ],
      [
        "POST",
        `/v1/rollouts/${rolloutId}/attempts/${attemptId}/events`,
        token,
        { events: [{ type: "custom", key: "agent:x", payload: { name: "x", data: 1 } }] },
        /key/,
      ],
    ];
    for (const [method, path, key, body, name] of cases) {
      const res = await fx.send(method, path, key, body);
      assert.equal(res.status, 400, `${method} ${path} ${JSON.stringify(body)}`);
      assert.match(errorOf(res.body).message, /unknown key/, path);
      assert.match(errorOf(res.body).message, name, path);
    }
    assert.deepEqual(await fx.snapshot(), before, "nothing was written");
    assert.deepEqual(await fx.admin.listModels(), []);
  });
});

Deno.test("edges: a corrupted database is named, without the CLI usage, and no key file is written", async () => {
  const dir = await Deno.makeTempDir({ prefix: "reins-edges-" });
  try {
    const db = `${dir}/broken.db`;
    await Deno.writeTextFile(db, "this is not a database ".repeat(400));
    const out = await runCli(["--db", db, "--port", "0", "--no-ui"]);
    assert.equal(out.code, 1);
    assert.match(out.stderr, new RegExp(`SQLite file '${db}'`));
    assert.match(out.stderr, /not a database/);
    assert.doesNotMatch(out.stderr, /usage:/);
    await assert.rejects(Deno.stat(`${db}.key`), Deno.errors.NotFound, "no key file");
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
});

Deno.test("edges: --db in a missing directory fails naming it and creates nothing", async () => {
  const dir = await Deno.makeTempDir({ prefix: "reins-edges-" });
  try {
    const missing = `${dir}/no/such/dir`;
    const out = await runCli(["--db", `${missing}/x.db`, "--port", "0", "--no-ui"]);
    assert.equal(out.code, 1);
    assert.match(out.stderr, new RegExp(`the directory '${missing}' does not exist`));
    assert.doesNotMatch(out.stderr, /usage:/);
    await assert.rejects(Deno.stat(`${dir}/no`), Deno.errors.NotFound, "no directory created");
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
});

Deno.test("edges: a SIGKILLed gateway leaves nothing in its temp directory", async () => {
  // A private TMPDIR: other processes on the machine may use /tmp meanwhile.
  const tmp = await Deno.makeTempDir({ prefix: "reins-edges-tmp-" });
  try {
    const gw = await spawnGatewayProcess(["--db", ":memory:", "--port", "0", "--no-ui"], {
      REINS_ADMIN_KEY: "ra_edges_kill_key_0123",
      TMPDIR: tmp,
    });
    const res = await fetch(`${gw.url}/v1/health`);
    assert.equal(res.status, 200);
    await res.body?.cancel();
    await gw.stop("SIGKILL");
    const left = [];
    for await (const entry of Deno.readDir(tmp)) left.push(entry.name);
    assert.deepEqual(left, [], "no reins-serve-* (or any) folder left behind");
  } finally {
    await Deno.remove(tmp, { recursive: true });
  }
});
