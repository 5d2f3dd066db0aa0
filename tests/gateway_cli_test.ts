/** The gateway CLI: the admin key's source is printed, never the key (unless asked); bad flags exit 2. */
import assert from "node:assert/strict";
import { GatewayClient } from "../lib/gateway/client.ts";
import { startScriptedUpstream } from "../lib/proxy/scripted_upstream.ts";
import { loadCharTokenizer } from "../lib/tokens/char.ts";
import { spawnGatewayProcess, spawnProxyGateway } from "./support/gateway_process.ts";

const ROOT = new URL("..", import.meta.url).pathname;

Deno.test("cli: the key comes from REINS_ADMIN_KEY, and only its source is printed", async () => {
  const dir = await Deno.makeTempDir({ prefix: "reins-gw-cli-" });
  try {
    const key = "ra_cli_test_key_abcdef";
    const gw = await spawnGatewayProcess(["--db", `${dir}/x.db`, "--port", "0"], {
      REINS_ADMIN_KEY: key,
    });
    try {
      assert.match(gw.banner, /store: sqlite .*x\.db/);
      assert.match(gw.banner, /admin key: environment variable REINS_ADMIN_KEY/);
      assert.ok(!gw.banner.includes(key), "the key is not printed");
      const res = await fetch(`${gw.url}/v1/rollouts`, { headers: { "x-api-key": key } });
      assert.equal(res.status, 200);
      await res.body?.cancel();
    } finally {
      assert.equal((await gw.stop("SIGTERM")).success, true);
    }
    // --print-key prints it; without the variable the key file next to the db is used.
    const printed = await spawnGatewayProcess([
      "--db",
      `${dir}/y.db`,
      "--port",
      "0",
      "--print-key",
    ]);
    try {
      const fileKey = (await Deno.readTextFile(`${dir}/y.db.key`)).trim();
      assert.match(printed.banner, new RegExp(`admin key: ${fileKey}`));
      assert.equal(
        ((await Deno.stat(`${dir}/y.db.key`)).mode ?? 0) & 0o077,
        0,
        "key file is private",
      );
    } finally {
      await printed.stop("SIGTERM");
    }
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
});

Deno.test("cli: bad flags exit 2 naming the flag", async () => {
  for (
    const [args, message] of [
      [["--port", "http"], /--port: expected a port number/],
      [["--synchronous", "OFF"], /--synchronous: expected FULL or NORMAL/],
      [["--db", "a.db", "--postgres", "postgres://x"], /--db and --postgres/],
      [["--nope"], /Unknown option '--nope'/],
      [
        ["--db", ":memory:", "--tokenizer", "gpt"],
        /--tokenizer: expected char, qwen3 or a directory holding tokenizer\.json, got 'gpt'/,
      ],
      [
        ["--db", ":memory:", "--monitors-module", "tests/fixtures/no_such_monitors.ts"],
        /--monitors-module: monitor module file:.*no_such_monitors\.ts: could not be imported/,
      ],
      [
        ["--db", ":memory:", "--no-ui", "--monitors-module", "tests/fixtures/spinning_monitors.ts"],
        /--monitors-module: the monitors run in the UI's runner; drop --no-ui/,
      ],
    ] as const
  ) {
    const out = await new Deno.Command(Deno.execPath(), {
      args: ["run", "-A", "bin/gateway.ts", ...args],
      cwd: ROOT,
      stdout: "piped",
      stderr: "piped",
    }).output();
    assert.equal(out.code, 2, args.join(" "));
    assert.match(new TextDecoder().decode(out.stderr), message);
  }
});

Deno.test("cli: --upstream serves the proxy at /proxy, and the UI answers at /ui behind the key", async () => {
  const dir = await Deno.makeTempDir({ prefix: "reins-gw-cli-" });
  const tokenizer = await loadCharTokenizer();
  const upstream = await startScriptedUpstream({ tokenizer, turns: [{ content: "4" }] });
  const key = "ra_cli_proxy_key_abcdef";
  const gw = await spawnProxyGateway({ db: `${dir}/x.db`, upstream: upstream.url, adminKey: key });
  try {
    const client = new GatewayClient(gw.url, { apiKey: key });
    await client.createRollouts([{ rollout_id: "r1", input: { q: "2+2" } }]);
    const [claimed] = await client.claim({ worker: "w", limit: 1, lease_ms: 60_000 });
    const base = `${gw.url}/proxy/r1/${claimed.attempt.attempt_id}/v1`;
    const res = await fetch(`${base}/chat/completions`, {
      method: "POST",
      headers: { authorization: `Bearer ${claimed.token}`, "content-type": "application/json" },
      body: JSON.stringify({ model: "policy", messages: [{ role: "user", content: "2+2?" }] }),
    });
    assert.equal(res.status, 200);
    const body = await res.json();
    assert.equal(body.choices[0].message.content, "4");
    const events = await client.listEvents("r1", { type: "model_request" });
    assert.equal(events.length, 1, "the call was captured");
    const ui = await fetch(`${gw.url}/ui`);
    assert.equal(ui.status, 401, "the UI needs the key");
    await ui.body?.cancel();
  } finally {
    await gw.stop("SIGTERM");
    await upstream.close();
    await Deno.remove(dir, { recursive: true });
  }
});

Deno.test("cli: --monitors-module runs a module's monitors on the checking thread; an endless check is stopped, the gateway keeps answering", async () => {
  const dir = await Deno.makeTempDir({ prefix: "reins-gw-cli-" });
  const key = "ra_cli_monitor_key_abcdef";
  const gw = await spawnGatewayProcess([
    "--db",
    `${dir}/x.db`,
    "--port",
    "0",
    "--lease-sweep-ms",
    "0",
    "--monitors-module",
    "tests/fixtures/spinning_monitors.ts",
  ], { REINS_ADMIN_KEY: key });
  try {
    const client = new GatewayClient(gw.url, { apiKey: key });
    await client.createRollouts([
      { rollout_id: "calm", input: {} },
      { rollout_id: "spin", input: {} },
    ]);
    for (const { rollout, attempt } of await client.claim({ worker: "w", limit: 2 })) {
      const text = rollout.rollout_id === "spin" ? "spin, spin, spin" : "ran the tests";
      await client.postEvents(rollout.rollout_id, attempt.attempt_id, [
        { type: "log", payload: { stream: "stdout", text } },
      ]);
      await client.transition(rollout.rollout_id, {
        to: "succeeded",
        expected_version: rollout.version,
      });
    }
    // The endless check holds its own thread for its budget (1 s + 5 ms per event), not the
    // gateway's: health answers meanwhile, and the flags arrive once it is stopped.
    const flagsOf = async (id: string) => {
      const event = (await client.listEvents(id, { type: "custom" })).find((e) =>
        (e.payload as { name?: string }).name === "monitor_flags"
      );
      return (event?.payload as { data?: { flags?: Array<{ monitor: string; message: string }> } })
        ?.data?.flags;
    };
    let flags: Record<string, string[]> = {};
    for (let i = 0; i < 200 && Object.keys(flags).length < 2; i++) {
      const started = performance.now();
      const health = await fetch(`${gw.url}/v1/health`);
      assert.equal(health.status, 200);
      await health.body?.cancel();
      assert.ok(performance.now() - started < 2_000, "the gateway answered within 2 s");
      flags = {};
      for (const id of ["calm", "spin"]) {
        const found = await flagsOf(id);
        if (found) flags[id] = found.filter((f) => f.monitor === "spins").map((f) => f.message);
      }
      await new Promise((r) => setTimeout(r, 100));
    }
    assert.deepEqual(flags.calm, ["spins: looked, on the checking thread"]);
    assert.equal(flags.spin?.length, 1, JSON.stringify(flags));
    assert.match(
      flags.spin[0],
      /^spins: the check ran past its time budget of \d+ ms \(1000 ms \+ 5 ms per event/,
    );
  } finally {
    await gw.stop("SIGTERM");
    await Deno.remove(dir, { recursive: true });
  }
});
