/**
 * Collocation: the proxy's token-level upstream client (`ReinsGenerateUpstream`) talks to the
 * trainer worker's `/generate` directly, streaming or not, and gets what the trainer client
 * gets for the same seed.
 */
import assert from "node:assert/strict";
import { ReinsGenerateUpstream } from "../lib/proxy/upstreams/token_level.ts";
import type { TryContext } from "../lib/proxy/upstreams/pool.ts";
import { withWorker } from "./trainer_helpers.ts";
import { HttpClient } from "../lib/http/client.ts";

Deno.test("trainer worker serves the proxy's token-level upstream", async () => {
  await withWorker(async ({ client, url }) => {
    const expected = await client.generate({
      prompt_ids: [1, 2, 3],
      max_tokens: 12,
      temperature: 0.8,
      top_p: 0.9,
      stop_ids: [],
      seed: 11,
    });
    const upstream = new ReinsGenerateUpstream();
    for (const stream of [false, true]) {
      const controller = new AbortController();
      const ctx: TryContext = {
        endpoint: url,
        signal: controller.signal,
        attempt: 0,
        touch() {},
        commit() {},
        fetch: (url, init) => new HttpClient().fetch(url, init),
      };
      const chunks: number[][] = [];
      const result = await upstream.generate({
        promptIds: Uint32Array.from([1, 2, 3]),
        sampling: { max_tokens: 12, temperature: 0.8, top_p: 0.9, stop: [], seed: 11 },
        stopIds: [],
        stream,
        onTokens: (ids) => chunks.push(ids),
      }, ctx);
      assert.deepEqual(result.ids, expected.ids);
      assert.deepEqual(result.logprobs, expected.logprobs);
      assert.equal(result.policy_version, 0);
      assert.equal(result.finish_reason, "length");
      assert.equal(chunks.length, stream ? 12 : 1);
    }
  });
});
