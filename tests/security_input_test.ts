/**
 * Bounded input (#16 item 5, the schema parts), replayed against both stores and through the
 * gateway's HTTP app; each case asserts the refusal (400 naming the field) and that nothing
 * changed:
 *
 * | attack | before | now |
 * | --- | --- | --- |
 * | JSON nested ~2 000 (or 100 000) deep in a rollout input or an event | 500, stack overflow | 400 naming the field |
 * | a NUL inside `worker` or `event_key` | 200; SQLite read the key back cut at the NUL: keys collided, a lease renewed under another name | 400 |
 * | a model endpoint `javascript:alert(1)` | stored | 400 `endpoints[0]` |
 * | a config typo `config.max_attemps` | silently ignored | 400 naming `config.max_attemps` |
 */
import { jsonDepth } from "../lib/http/body.ts";
import { mulberry32 } from "./fixtures/algo/samples.ts";
import assert from "node:assert/strict";
import { openPostgresStore } from "../lib/gateway/postgres_store.ts";
import { startGateway } from "../lib/gateway/server.ts";
import { openSqliteStore } from "../lib/gateway/sqlite_store.ts";
import type { Store } from "../lib/gateway/store.ts";
import { normalizeCreates, parseEvents } from "../lib/gateway/store_input.ts";
import {
  isPlainJsonObject,
  JsonObjectSchema,
  JsonValueSchema,
  MAX_JSON_DEPTH,
  ValidationError,
} from "../lib/schema.ts";
import { startPostgres } from "./support/postgres.ts";

/** `[[[…1…]]]` with `depth` arrays, or objects `{a: {a: …}}`. */
function nested(depth: number, kind: "array" | "object" = "array"): unknown {
  let value: unknown = 1;
  for (let i = 0; i < depth; i++) value = kind === "array" ? [value] : { a: value };
  return value;
}

async function rejects400(p: Promise<unknown>, message: RegExp): Promise<void> {
  await assert.rejects(p, (err: unknown) => {
    const status = (err as { status?: number }).status ??
      (err instanceof ValidationError ? 400 : undefined);
    assert.equal(status, 400, String(err));
    assert.match((err as Error).message, message);
    assert.ok(!(err as Error).message.includes("\u0000"), "messages never carry a raw NUL");
    return true;
  });
}

Deno.test("every JSON walker of the schemas survives 100 000 levels without recursion", () => {
  for (const kind of ["array", "object"] as const) {
    const deep = nested(100_000, kind);
    const result = JsonValueSchema.safeParse(deep);
    assert.equal(result.success, false);
    assert.match(result.error!.issues[0].message, /nested deeper than 128 levels/);
    assert.equal(JsonObjectSchema.safeParse({ x: deep }).success, false);
    assert.equal(isPlainJsonObject({ x: deep }), false);
    assert.throws(
      () => normalizeCreates([{ input: deep as never }]),
      /ValidationError: rollouts\[0\]\.input: nested deeper than 128 levels/,
    );
    assert.throws(
      () =>
        parseEvents([{
          type: "model_request",
          payload: {
            flavor: "generate",
            request: { messages: deep },
            prompt_token_ids: [1],
            response_token_ids: [],
            response_logprobs: [],
            policy_version: 0,
          },
        }]),
      /ValidationError: events\[0\]\.payload\.request: nested deeper than 128 levels/,
    );
  }
  // The limit is exact: MAX_JSON_DEPTH levels pass, one more does not.
  assert.equal(JsonValueSchema.safeParse(nested(MAX_JSON_DEPTH)).success, true);
  assert.equal(JsonValueSchema.safeParse(nested(MAX_JSON_DEPTH + 1)).success, false);
  // Non-JSON values inside are named by their path.
  const bad = JsonValueSchema.safeParse({ a: [1, { b: Infinity }] });
  assert.deepEqual(bad.error!.issues[0].path, ["a", 1, "b"]);
  assert.equal(JsonValueSchema.safeParse({ f: () => 1 }).success, false);
  assert.equal(JsonValueSchema.safeParse(JSON.parse('{"__proto__": {"x": 1}}')).success, false);
});

function storeCases(t: Deno.TestContext, open: () => Promise<Store>) {
  const step = (name: string, fn: (store: Store) => Promise<void>) =>
    t.step(name, async () => {
      const store = await open();
      try {
        await fn(store);
      } finally {
        await store.close();
      }
    });
  return (async () => {
    await step("deep JSON in a rollout input: 400 naming the field, nothing stored", async (s) => {
      const before = await s.lastSeq();
      for (const depth of [2_000, 100_000]) {
        await rejects400(
          s.createRollouts([{ rollout_id: "ok", input: 1 }, {
            rollout_id: "deep",
            input: nested(depth) as never,
          }]),
          /^rollouts\[1\]\.input: nested deeper than 128 levels/,
        );
      }
      assert.equal(await s.getRollout("ok"), null);
      assert.equal(await s.lastSeq(), before);
    });

    await step("deep JSON in an event: 400 naming the field, nothing stored", async (s) => {
      await s.createRollouts([{ rollout_id: "r", input: 1 }]);
      const [{ attempt }] = await s.claimRollouts({ worker: "w", limit: 1, lease_ms: 60_000 });
      const before = await s.lastSeq();
      await rejects400(
        s.appendEvents("r", attempt.attempt_id, [
          { type: "log", payload: { stream: "stdout", text: "fine" } },
          { type: "custom", payload: { name: "x", data: nested(2_000, "object") as never } },
        ]),
        /^events\[1\]\.payload\.data: nested deeper than 128 levels/,
      );
      await rejects400(
        s.appendEvents("r", attempt.attempt_id, [{
          type: "reward",
          payload: { value: 1, info: { deep: nested(2_000) as never } },
        }]),
        /^events\[0\]\.payload\.info: nested deeper than 128 levels/,
      );
      assert.equal(await s.lastSeq(), before);
      assert.equal((await s.getRollout("r"))!.reward, null);
    });

    await step("a NUL in worker: 400, and no lease is renewed under another name", async (s) => {
      await s.createRollouts([{ rollout_id: "r", input: 1 }, { rollout_id: "q", input: 2 }]);
      await rejects400(
        s.claimRollouts({ worker: "w\u0000evil", limit: 1, lease_ms: 60_000 }),
        /^worker: must not contain control characters/,
      );
      await rejects400(
        s.claimRollouts({ worker: "w", claim_key: "k\u0000", limit: 1, lease_ms: 60_000 }),
        /^claim_key: must not contain control characters/,
      );
      assert.equal((await s.getRollout("r"))!.status, "queuing", "nothing was claimed");
      const [{ attempt }] = await s.claimRollouts({ worker: "w", limit: 1, lease_ms: 60_000 });
      const before = await s.getRollout("r");
      await rejects400(
        s.renewLease("r", attempt.attempt_id, "w\u0000evil", 600_000),
        /^worker: must not contain control characters/,
      );
      assert.deepEqual(await s.getRollout("r"), before);
    });

    await step("a NUL in event_key: 400, and two such keys never collide", async (s) => {
      await s.createRollouts([{ rollout_id: "r", input: 1 }]);
      const [{ attempt }] = await s.claimRollouts({ worker: "w", limit: 1, lease_ms: 60_000 });
      const before = await s.lastSeq();
      for (const key of ["k\u0000a", "k\u0000b", "k\n", "k\u007f"]) {
        await rejects400(
          s.appendEvents("r", attempt.attempt_id, [{
            type: "log",
            event_key: key,
            payload: { stream: "stdout", text: key },
          }]),
          /^events\[0\]\.event_key: must not contain control characters/,
        );
      }
      assert.equal(await s.lastSeq(), before);
      // Ids in the path and labels get the same rule.
      await rejects400(
        s.appendEvents("r", `${attempt.attempt_id}\u0000x`, [{
          type: "log",
          payload: { stream: "stdout", text: "x" },
        }]),
        /^attempt_id: must use only/,
      );
      await rejects400(
        s.createRollouts([{ rollout_id: "l", input: 1, labels: { "a\u0000b": "x" } }]),
        /^rollouts\[0\]\.labels\["a\\u0000b"\]: label keys are 1–200 characters/,
      );
      await rejects400(
        s.listRollouts({ limit: 10, labels: { step: "1\u0000" } }),
        /^labels\.step: label values are at most 2 000 characters without control/,
      );
      assert.equal(await s.getRollout(`r\u0000x`), null);
      assert.equal(await s.lastSeq(), before);
    });

    await step("a javascript: model endpoint is refused", async (s) => {
      for (const endpoint of ["javascript:alert(1)", "data:text/html,hi", "file:///etc/passwd"]) {
        await rejects400(
          s.upsertModel({ name: "policy", endpoints: [endpoint], version: 0, info: {} }),
          /^endpoints\[0\]: must be an http\(s\) URL/,
        );
      }
      assert.deepEqual(await s.listModels(), []);
      const ok = await s.upsertModel({
        name: "policy",
        endpoints: ["http://127.0.0.1:9000/v1", "https://example.org/v1"],
        version: 0,
        info: {},
      });
      assert.equal(ok.endpoints.length, 2);
    });

    await step("a config typo is refused, naming the key", async (s) => {
      const before = await s.lastSeq();
      await rejects400(
        s.createRollouts([{
          rollout_id: "t",
          input: 1,
          config: { max_attemps: 3 } as never,
        }]),
        /^rollouts\[0\]\.config\.max_attemps: unknown key \(expected one of: timeout_s, max_attempts, harness, template\)/,
      );
      await rejects400(
        s.createRollouts([{
          rollout_id: "t",
          input: 1,
          config: { harness: { name: "builtin", optons: {} } } as never,
        }]),
        /^rollouts\[0\]\.config\.harness\.optons: unknown key/,
      );
      await rejects400(
        s.createRollouts([{ rollout_id: "t", input: 1, lables: { a: "b" } } as never]),
        /^rollouts\[0\]\.lables: unknown key/,
      );
      assert.equal(await s.getRollout("t"), null);
      assert.equal(await s.lastSeq(), before);
    });
  })();
}

Deno.test("security (input): the SQLite store refuses unbounded input", async (t) => {
  const dir = await Deno.makeTempDir({ prefix: "reins-sec-input-" });
  let n = 0;
  try {
    await storeCases(t, () => Promise.resolve(openSqliteStore(`${dir}/s${n++}.db`)));
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
});

Deno.test("security (input): the PostgreSQL store refuses unbounded input", async (t) => {
  const pg = await startPostgres();
  try {
    await storeCases(t, async () => openPostgresStore(await pg.newDatabase()));
  } finally {
    await pg.stop();
  }
});

Deno.test("security (input): the gateway's HTTP app answers 400 naming the field", async () => {
  const gw = await startGateway({ db: ":memory:", leaseSweepMs: 0 });
  const call = async (method: string, path: string, body: unknown) => {
    const res = await fetch(`${gw.url}${path}`, {
      method,
      headers: { authorization: `Bearer ${gw.adminKey}`, "content-type": "application/json" },
      body: typeof body === "string" ? body : JSON.stringify(body),
    });
    return { status: res.status, body: await res.json() };
  };
  const expect400 = async (method: string, path: string, body: unknown, message: RegExp) => {
    const res = await call(method, path, body);
    assert.equal(res.status, 400, `${method} ${path}: ${JSON.stringify(res.body)}`);
    assert.equal(res.body.error.code, "invalid");
    assert.match(res.body.error.message, message);
  };
  try {
    const seq0 = (await call("GET", "/v1/health", undefined)).body.seq;
    // A body nested 2 000 deep, as the red team sent it: the app measures the depth of the
    // JSON text before parsing it (lib/http/body.ts), the store's schemas check each field.
    const deep = `${"[".repeat(2_000)}1${"]".repeat(2_000)}`;
    await expect400(
      "POST",
      "/v1/rollouts",
      `{"rollouts": [{"rollout_id": "deep", "input": ${deep}}]}`,
      /^body: JSON nested deeper than 128 levels/,
    );
    await expect400(
      "POST",
      "/v1/rollouts",
      { rollouts: [{ rollout_id: "t", input: 1, config: { max_attemps: 3 } }] },
      /^rollouts\[0\]\.config\.max_attemps: unknown key/,
    );
    await expect400(
      "POST",
      "/v1/models",
      { name: "policy", endpoints: ["javascript:alert(1)"], version: 0 },
      /^endpoints\[0\]: must be an http\(s\) URL/,
    );
    assert.equal((await call("GET", "/v1/health", undefined)).body.seq, seq0, "nothing stored");

    await call("POST", "/v1/rollouts", { rollouts: [{ rollout_id: "r", input: 1 }] });
    await expect400(
      "POST",
      "/v1/rollouts/claim",
      { worker: "w\u0000evil", limit: 1 },
      /^worker: must not contain control characters/,
    );
    const claimed = await call("POST", "/v1/rollouts/claim", { worker: "w", limit: 1 });
    const aid = claimed.body.claimed[0].attempt.attempt_id;
    const seq1 = (await call("GET", "/v1/health", undefined)).body.seq;
    await expect400(
      "POST",
      `/v1/rollouts/r/attempts/${aid}/lease`,
      { worker: "w\u0000evil" },
      /^worker: must not contain control characters/,
    );
    await expect400(
      "POST",
      `/v1/rollouts/r/attempts/${aid}/events`,
      { events: [{ type: "log", event_key: "k\u0000a", payload: { stream: "stdout", text: "" } }] },
      /^events\[0\]\.event_key: must not contain control characters/,
    );
    await expect400(
      "POST",
      `/v1/rollouts/r/attempts/${aid}/events`,
      `{"events": [{"type": "custom", "payload": {"name": "x", "data": ${deep}}}]}`,
      /^body: JSON nested deeper than 128 levels/,
    );
    await expect400(
      "PATCH",
      "/v1/rollouts/r",
      `{"to": "succeeded", "info": {"x": ${deep}}}`,
      /^body: JSON nested deeper than 128 levels/,
    );
    assert.equal((await call("GET", "/v1/health", undefined)).body.seq, seq1, "nothing stored");
    const rollout = (await call("GET", "/v1/rollouts/r", undefined)).body;
    assert.equal(rollout.status, "running");
    assert.equal(rollout.attempts[0].worker, "w");
  } finally {
    await gw.close();
  }
});

Deno.test("jsonDepth: the jumping scan counts what a character-by-character scan counts (random JSON-like texts)", () => {
  // The plain scan, kept here as the reference.
  const reference = (text: string) => {
    let depth = 0;
    let deepest = 0;
    let inString = false;
    for (let i = 0; i < text.length; i++) {
      const ch = text[i];
      if (inString) {
        if (ch === "\\") i++;
        else if (ch === '"') inString = false;
      } else if (ch === '"') inString = true;
      else if (ch === "[" || ch === "{") deepest = Math.max(deepest, ++depth);
      else if (ch === "]" || ch === "}") depth--;
    }
    return deepest;
  };
  const rand = mulberry32(29);
  const dense = ['"', "\\", "[", "]", "{", "}", "a", ","];
  // Long runs of plain characters, so that the scan jumps, and escapes around them.
  const sparse = [...dense, ..."b".repeat(40)];
  // Long runs of digits and commas outside strings (a token-id array), so that the scan jumps
  // over them too, with backslashes (plain characters there) among them.
  const numeric = ['"', "[", "]", "{", "}", "\\", ..."1,".repeat(60)];
  for (let n = 0; n < 30_000; n++) {
    const alphabet = [dense, sparse, numeric][n % 3];
    const length = Math.floor(rand() * (alphabet === numeric ? 2_000 : 300));
    let text = "";
    for (let i = 0; i < length; i++) text += alphabet[Math.floor(rand() * alphabet.length)];
    assert.equal(jsonDepth(text), reference(text), JSON.stringify(text));
  }
  // A real body with escapes in its one long string.
  const body = JSON.stringify({ messages: [{ content: `${"x".repeat(5_000)}\\"[{`.repeat(50) }] });
  assert.equal(jsonDepth(body), 3);
  const ids = JSON.stringify([{ payload: { ids: Array.from({ length: 5_000 }, (_, i) => i) } }, [
    [],
  ]]);
  assert.equal(jsonDepth(ids), 4);
  assert.equal(jsonDepth(ids, 2), 3, "stops once past the limit");
});
