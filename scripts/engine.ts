/**
 * `deno task engine --gguf <file> --port <p>` serves a GGUF policy with llama.cpp behind the
 * torch worker's token-level generate API (lib/engine/server.ts): `POST /generate`,
 * `GET /health`, `POST /sync {version, gguf}`. Point the proxy at it with the upstream kind
 * `llama_cpp`. Prints `REINS_ENGINE_READY {"url": ...}` once listening; bad flags exit 2 naming
 * the flag.
 *
 * @module
 */
import { intFlag, parseFlags, portFlag } from "../lib/flags.ts";
import { startEngineServer } from "../lib/engine/server.ts";

const USAGE = `usage: deno task engine --gguf FILE [--port N] [--host H] [--version V]
  [--slots N] [--threads N] [--gpu cuda] [--kv-cache F32|F16]
  --gguf       the policy (a GGUF export: deno task export, or reins_worker.export)
  --port       0 (default) picks a free port
  --version    policy version of the file (default 0); /sync moves it on
  --slots      sequences generated at once (default 8)
  --threads    llama.cpp CPU threads (default 1)
  --gpu cuda   node-llama-cpp's CUDA build (default: its CPU build)
  --kv-cache   KV cache precision (default F32: logprobs match the fp32 trainer)`;

async function main(): Promise<number> {
  let flags;
  try {
    flags = parseFlags(Deno.args, {
      gguf: { type: "string" },
      port: { type: "string", default: "0" },
      host: { type: "string", default: "127.0.0.1" },
      version: { type: "string", default: "0" },
      slots: { type: "string", default: "8" },
      threads: { type: "string", default: "1" },
      gpu: { type: "string" },
      "kv-cache": { type: "string", default: "F32" },
    }, USAGE);
    if (!flags) return 0;
    if (!flags.gguf) throw new Error("--gguf: give the GGUF file to serve");
    const stat = await Deno.stat(flags.gguf).catch(() => null);
    if (!stat?.isFile) throw new Error(`--gguf: no file at ${flags.gguf}`);
    if (flags.gpu !== undefined && flags.gpu !== "cuda") {
      throw new Error(`--gpu: expected cuda, got '${flags.gpu}'`);
    }
    const kv = flags["kv-cache"];
    if (kv !== "F32" && kv !== "F16") {
      throw new Error(`--kv-cache: expected F32 or F16, got '${kv}'`);
    }
    const engine = await startEngineServer({
      gguf: flags.gguf,
      hostname: flags.host,
      port: portFlag(flags.port),
      version: intFlag("version", flags.version, 0),
      slots: intFlag("slots", flags.slots, 1),
      threads: intFlag("threads", flags.threads, 0),
      ...(flags.gpu ? { gpu: "cuda" as const } : {}),
      kvCacheType: kv,
    });
    console.log(`REINS_ENGINE_READY ${JSON.stringify({ url: engine.url })}`);
    await new Promise<void>((resolve) => Deno.addSignalListener("SIGINT", () => resolve()));
    await engine.close();
    return 0;
  } catch (error) {
    console.error(`engine: ${(error as Error).message} (deno task engine --help)`);
    return 2;
  }
}

Deno.exit(await main());
