/**
 * `deno task policy` serves a policy endpoint (token level: `POST /generate`, what the reins
 * proxy calls) and prints its URL, for running a real harness CLI by hand against a gateway:
 *
 * ```sh
 * deno task policy --scripted bugfix:opencode          # a scripted agent that fixes calc.py
 * deno task policy --worker [--model tiny|FILE.pt|HF_DIR] [--python python3]
 * ```
 *
 * `--scripted bugfix:<cli>[:correct|wrong|answer]` replays, with that CLI's own tool names,
 * read `calc.py` → edit it → answer (the same script the real-CLI tests use; side conversations
 * such as titles get a short answer); `<cli>` is `opencode`, `claude_code`, `codex` or
 * `qwen_code`, `--workdir` the agent's directory (default `runs/cli/<cli>/work`, where
 * `deno task run-cli` puts it). `--scripted FILE.ts` loads a module whose default export is a
 * policy function (`(input: ScriptedPolicyInput) => ScriptedTurn`). `--worker` starts the
 * PyTorch worker (`/usr/bin/python3` with torch) with a model: `tiny` (a random built-in
 * decoder over the tokenizer's vocabulary: it answers garbage, but every token is real), a
 * checkpoint written by the worker (`*.pt`), or a Hugging Face directory (needs
 * `transformers`). Prompts are rendered by the gateway's tokenizer (Qwen3 by default), so the
 * policy and the gateway must agree on it.
 *
 * Prints `policy: <url>` and the gateway command that uses it, then serves until Ctrl-C.
 *
 * @module
 */
import { parseArgs } from "node:util";
import { resolve } from "node:path";
import { portFlag } from "../lib/flags.ts";
import { cliScriptedPolicy } from "../lib/harness/cli/scripted.ts";
import { cliAdapter } from "../lib/harness/cli/registry.ts";
import {
  type ScriptedPolicyInput,
  type ScriptedTurn,
  startScriptedUpstream,
} from "../lib/proxy/scripted_upstream.ts";
import { loadQwen3Tokenizer } from "../lib/tokens/qwen3.ts";
import { startLocalWorker } from "../lib/trainer/local_worker.ts";
import type { CliName } from "../lib/harness/cli/schema.ts";

const USAGE =
  `usage: deno task policy (--scripted bugfix:<cli>[:fix] | --scripted FILE.ts | --worker)
  [--model tiny|FILE.pt|HF_DIR] [--workdir DIR] [--port N] [--python PYTHON]`;

type Policy = (input: ScriptedPolicyInput) => ScriptedTurn | Promise<ScriptedTurn>;

/** The default working directory of `cli`'s by-hand runs (shared with `run_cli.ts`). */
export function defaultWorkdir(cli: string): string {
  return resolve(`runs/cli/${cli}/work`);
}

/** Resolves `--scripted`: a built-in script name or a module path. */
export async function scriptedPolicy(spec: string, workdir?: string): Promise<Policy> {
  const m = /^bugfix:([a-z_]+)(?::(correct|wrong|answer))?$/.exec(spec);
  if (m) {
    const cli = cliAdapter(m[1]).name as CliName;
    return cliScriptedPolicy(cli, {
      workdir: workdir ?? defaultWorkdir(cli),
      fix: (m[2] ?? "correct") as "correct" | "wrong" | "answer",
    });
  }
  if (/\.(ts|js|mjs)$/.test(spec)) {
    const mod = await import(new URL(`file://${resolve(spec)}`).href);
    if (typeof mod.default !== "function") {
      throw new Error(`--scripted: ${spec} has no default export of a policy function`);
    }
    return mod.default as Policy;
  }
  throw new Error(
    `--scripted: expected bugfix:<cli>[:correct|wrong|answer] or a .ts module, got ${
      JSON.stringify(spec)
    }`,
  );
}

async function main(args: string[]): Promise<number> {
  let values;
  try {
    values = parseArgs({
      args,
      options: {
        scripted: { type: "string" },
        worker: { type: "boolean", default: false },
        model: { type: "string", default: "tiny" },
        workdir: { type: "string" },
        port: { type: "string", default: "8300" },
        python: { type: "string" },
        help: { type: "boolean", default: false },
      },
      strict: true,
    }).values;
  } catch (error) {
    console.error(`${(error as Error).message}\n${USAGE}`);
    return 2;
  }
  if (values.help) {
    console.log(USAGE);
    return 0;
  }
  let port: number;
  try {
    port = portFlag(values.port);
  } catch (error) {
    console.error(`${(error as Error).message}\n${USAGE}`);
    return 2;
  }
  if (!values.scripted === !values.worker) {
    console.error(`--scripted or --worker: choose exactly one\n${USAGE}`);
    return 2;
  }
  const tokenizer = await loadQwen3Tokenizer();
  let url: string;
  let close: () => Promise<void>;
  if (values.scripted) {
    let policy: Policy;
    try {
      policy = await scriptedPolicy(values.scripted, values.workdir && resolve(values.workdir));
    } catch (error) {
      console.error((error as Error).message);
      return 2;
    }
    const upstream = await startScriptedUpstream({ tokenizer, policy, port });
    url = upstream.url;
    close = () => upstream.close();
  } else {
    const worker = await startLocalWorker({
      port,
      ...(values.python ? { python: values.python } : {}),
    });
    const model = values.model === "tiny"
      ? {
        kind: "builtin" as const,
        config: {
          vocab_size: tokenizer.vocabSize,
          d_model: 64,
          n_layers: 2,
          n_heads: 4,
          n_kv_heads: 2,
          d_ff: 128,
          max_seq_len: 32_768,
        },
        seed: 0,
      }
      : values.model.endsWith(".pt")
      ? { kind: "checkpoint" as const, path: resolve(values.model) }
      : { kind: "hf" as const, path: values.model };
    try {
      await worker.client.init({ model });
    } catch (error) {
      console.error(`--model ${values.model}: ${(error as Error).message}`);
      await worker.close();
      return 1;
    }
    url = worker.url;
    close = () => worker.close();
  }
  console.log(`policy: ${url}`);
  console.log(
    `serve a gateway with it: deno task gateway --db runs/cli/gateway.db --upstream ${url}`,
  );
  const stop = new Promise<void>((done) => {
    Deno.addSignalListener("SIGINT", done);
    Deno.addSignalListener("SIGTERM", done);
  });
  await stop;
  await close();
  return 0;
}

if (import.meta.main) Deno.exit(await main(Deno.args));
