/**
 * One weight-sync protocol for every engine kind, against contract fakes that implement the
 * documented endpoints: SGLang's `POST /update_weights_from_disk` (`{model_path,
 * weight_version}` → `{success, message, num_paused_requests}`) and vLLM's dev-mode
 * `POST /collective_rpc` (`{method: "reload_weights"}` → `{results}`) + `POST
 * /reset_prefix_cache`, each fed a real HF export of a real worker checkpoint; the worker's
 * in-memory sync; and a run refusing to start on an engine it cannot sync.
 */
import assert from "node:assert/strict";
import { join } from "node:path";
import {
  EngineSyncError,
  requireSync,
  SglangSync,
  VllmSync,
  WorkerSync,
} from "../lib/engine/sync.ts";
import { runLoop } from "../lib/loop/mod.ts";
import type { LoopServices } from "../lib/loop/run.ts";
import { withWorker } from "./trainer_helpers.ts";

interface Fake {
  url: string;
  calls: { path: string; body: unknown }[];
  close(): Promise<void>;
}

function serve(handler: (path: string, body: unknown, req: Request) => Response): Promise<Fake> {
  const calls: Fake["calls"] = [];
  const server = Deno.serve({ hostname: "127.0.0.1", port: 0, onListen: () => {} }, async (req) => {
    const path = new URL(req.url).pathname;
    const text = req.method === "POST" ? await req.text() : "";
    let body: unknown = null;
    try {
      body = text ? JSON.parse(text) : null;
    } catch {
      return Response.json({ detail: "JSON decode error" }, { status: 400 });
    }
    calls.push({ path, body });
    return handler(path, body, req);
  });
  const addr = server.addr as Deno.NetAddr;
  return Promise.resolve({
    url: `http://127.0.0.1:${addr.port}`,
    calls,
    close: () => server.shutdown(),
  });
}

/** An HF directory the way SGLang/vLLM read it: config.json (Qwen3) + safetensors. */
async function readHfDir(dir: string): Promise<{ architectures: string[] } | string> {
  try {
    const config = JSON.parse(await Deno.readTextFile(join(dir, "config.json")));
    const files = [...Deno.readDirSync(dir)].map((e) => e.name);
    if (!files.some((f) => f.endsWith(".safetensors"))) return "no safetensors";
    return config;
  } catch (error) {
    return (error as Error).message;
  }
}

/** SGLang's native server, as far as weight sync goes. */
function fakeSglang(): Promise<Fake & { version: () => string | null }> {
  let version: string | null = null;
  return serve((path, body) => {
    if (path === "/get_model_info") return Response.json({ model_path: "x", is_generation: true });
    if (path === "/get_weight_version") return Response.json({ weight_version: version });
    if (path !== "/update_weights_from_disk") return new Response("not found", { status: 404 });
    const b = body as { model_path?: unknown; weight_version?: unknown };
    if (typeof b?.model_path !== "string") {
      return Response.json({ detail: "model_path: field required" }, { status: 422 });
    }
    return readHfDir(b.model_path).then((read) => {
      if (typeof read === "string" || !read.architectures?.includes("Qwen3ForCausalLM")) {
        return Response.json({
          success: false,
          message: `Failed to get weights iterator: ${read}`,
          num_paused_requests: 0,
        }, { status: 400 });
      }
      version = typeof b.weight_version === "string" ? b.weight_version : version;
      return Response.json({
        success: true,
        message: "Succeeded to update model weights.",
        num_paused_requests: 0,
      });
    }) as unknown as Response;
  }).then((fake) => ({ ...fake, version: () => version }));
}

/** vLLM's OpenAI server; dev-mode endpoints only with `devMode`. */
function fakeVllm(modelDir: string, devMode: boolean): Promise<Fake & { reloads: () => number }> {
  let reloads = 0;
  return serve((path, body) => {
    if (path === "/health") return new Response(null, { status: 200 });
    if (!devMode) return Response.json({ detail: "Not Found" }, { status: 404 });
    if (path === "/is_sleeping") return Response.json({ is_sleeping: false });
    if (path === "/reset_prefix_cache") return new Response(null, { status: 200 });
    if (path !== "/collective_rpc") return Response.json({ detail: "Not Found" }, { status: 404 });
    const method = (body as { method?: unknown })?.method;
    if (method === undefined) {
      return Response.json({ detail: "Missing 'method' in request body" }, { status: 400 });
    }
    if (method !== "reload_weights") {
      return Response.json({ detail: `no method ${method}` }, { status: 500 });
    }
    // Every worker reloads from the served directory: it must hold a complete checkpoint.
    return readHfDir(modelDir).then((read) => {
      if (typeof read === "string") {
        return Response.json({ detail: `reload failed: ${read}` }, { status: 500 });
      }
      reloads++;
      return Response.json({ results: [null] });
    }) as unknown as Response;
  }).then((fake) => ({ ...fake, reloads: () => reloads }));
}

Deno.test("weight sync: worker, SGLang and vLLM contract fakes, refusals", async (t) => {
  await withWorker(async ({ client, url }) => {
    const dir = await Deno.makeTempDir({ prefix: "reins-sync-" });
    try {
      const checkpoint = join(dir, "policy.pt");
      await client.save(checkpoint);

      await t.step("worker: in memory; a version it does not hold is an error", async () => {
        const sync = new WorkerSync(url, client);
        await sync.probe();
        const report = await sync.syncWeights(0, "");
        assert.equal(report.export_ms, 0);
        await assert.rejects(sync.syncWeights(3, ""), /holds version 0, not 3/);
      });

      await t.step("SGLang: HF export + /update_weights_from_disk with the version", async () => {
        const sglang = await fakeSglang();
        try {
          const sync = new SglangSync({
            endpoint: sglang.url,
            dir: join(dir, "sglang"),
            dtype: "float32",
          });
          await requireSync({ kind: "sglang", url: sglang.url }, sync);
          const report = await sync.syncWeights(4, checkpoint);
          assert.equal(report.version, 4);
          assert.equal(sglang.version(), "4");
          const update = sglang.calls.find((c) => c.path === "/update_weights_from_disk")!;
          assert.deepEqual(update.body, {
            model_path: join(dir, "sglang", "policy-v4"),
            weight_version: "4",
            abort_all_requests: false,
          });
          // SGLang refusing the weights fails the sync with its message.
          const broken = new SglangSync({
            endpoint: sglang.url,
            dir: join(dir, "sglang-broken"),
            exporter: async (r) => void await Deno.mkdir(r.hf!, { recursive: true }),
          });
          await assert.rejects(
            broken.syncWeights(5, checkpoint),
            (e: Error) =>
              e instanceof EngineSyncError && /answered 400: Failed to get weights/.test(e.message),
          );
          assert.equal(sglang.version(), "4");
        } finally {
          await sglang.close();
        }
      });

      await t.step(
        "vLLM: export into the served dir + /collective_rpc reload_weights",
        async () => {
          const modelDir = join(dir, "vllm-model");
          const vllm = await fakeVllm(modelDir, true);
          try {
            const sync = new VllmSync({ endpoint: vllm.url, modelDir, dtype: "float32" });
            await requireSync({ kind: "vllm", url: vllm.url }, sync);
            await sync.syncWeights(1, checkpoint);
            assert.equal(vllm.reloads(), 1);
            const paths = vllm.calls.map((c) => c.path);
            assert.deepEqual(paths.slice(-2), ["/collective_rpc", "/reset_prefix_cache"]);
            assert.deepEqual(vllm.calls.at(-2)!.body, { method: "reload_weights" });
            assert.equal(typeof await readHfDir(modelDir), "object");
          } finally {
            await vllm.close();
          }
        },
      );

      await t.step("a run refuses to start on an engine it cannot sync", async () => {
        const vllm = await fakeVllm(join(dir, "unused"), false);
        const outDir = join(dir, "refused-run");
        const services = {
          engine: { kind: "vllm", url: vllm.url, sync: null },
        } as unknown as LoopServices;
        const config = {
          name: "refused",
          out_dir: outDir,
          tasks: [{ id: "t", input: {} }],
          harness: { name: "builtin" },
          steps: 1,
        };
        try {
          await assert.rejects(
            runLoop(config, {
              ...services,
              engine: { kind: "openai_compatible", url: vllm.url, sync: null },
            }),
            /openai_compatible engine at .* cannot sync weights/,
          );
          await assert.rejects(
            runLoop(config, {
              ...services,
              engine: {
                kind: "vllm",
                url: vllm.url,
                sync: new VllmSync({ endpoint: vllm.url, modelDir: outDir }),
              },
            }),
            /vllm engine at .* cannot sync weights: .*VLLM_SERVER_DEV_MODE=1/,
          );
          // Refused before anything was written.
          assert.equal(await Deno.stat(outDir).catch(() => null), null);
        } finally {
          await vllm.close();
        }
      });
    } finally {
      await Deno.remove(dir, { recursive: true });
    }
  });
});
