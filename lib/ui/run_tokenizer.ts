/**
 * The tokenizer a run used, found from the run itself so that the UI decodes its tokens right
 * by default (a char-tokenizer run decoded with Qwen3's vocabulary reads as garbage). In order:
 *
 * 1. the run directory ships one: `<run dir>/tokenizer.json` (a Hugging Face tokenizer);
 * 2. the run's `config.json` names one: a `tokenizer` field (`char`, `qwen3` or a directory),
 *    or an `hf` model whose directory holds `tokenizer.json`;
 * 3. the stored model calls: every candidate (char, then Qwen3) whose vocabulary holds every
 *    token id seen, and that decodes the stored `response_text` back exactly when calls carry
 *    one (up to the end-of-turn token); the smallest vocabulary that fits wins;
 * 4. a builtin model in `config.json` whose `vocab_size` is the char tokenizer's.
 *
 * None of these: no tokenizer (the detail page shows token ids instead of wrong text). The
 * result says which rule decided, so the command line can print it.
 *
 * @module
 */
import { join } from "node:path";
import type { Store } from "../gateway/store.ts";
import { loadCharTokenizer } from "../tokens/char.ts";
import { loadHfTokenizerFromDir } from "../tokens/hf.ts";
import { loadQwen3Tokenizer } from "../tokens/qwen3.ts";
import type { ChatTokenizer } from "../tokens/types.ts";

/** What {@link detectRunTokenizer} found. */
export interface RunTokenizer {
  tokenizer: ChatTokenizer | null;
  /** `char`, `qwen3`, a directory, or `none`. */
  name: string;
  /** Which rule decided, in words (`config.json tokenizer`, `stored calls: 12 of 12 …`). */
  reason: string;
}

/** Where to look. */
export interface RunTokenizerSource {
  /** The run's directory (`runs/<name>/`, the folder of its `gateway.db`). */
  runDir?: string | null;
  /** The run's store (its model calls are probed). */
  store?: Store | null;
  /** Most model calls read from the store (default 24). */
  probeCalls?: number;
}

/** The tokenizers reins ships, by the name a config or `--tokenizer` gives. */
export const BUILTIN_TOKENIZERS: Readonly<Record<string, () => Promise<ChatTokenizer>>> = {
  char: loadCharTokenizer,
  qwen3: loadQwen3Tokenizer,
};

/**
 * Loads a tokenizer by name (`char`, `qwen3`) or Hugging Face directory.
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * import { loadNamedTokenizer } from "./run_tokenizer.ts";
 * assert.equal((await loadNamedTokenizer("char")).name, "char");
 * ```
 */
export async function loadNamedTokenizer(name: string): Promise<ChatTokenizer> {
  // Own keys only: a name like `constructor` is not a builtin.
  if (Object.hasOwn(BUILTIN_TOKENIZERS, name)) return await BUILTIN_TOKENIZERS[name]();
  if (await isFile(join(name, "tokenizer.json"))) return await loadHfTokenizerFromDir(name);
  throw new Error(
    `tokenizer: expected char, qwen3 or a directory holding tokenizer.json, got '${name}'`,
  );
}

/**
 * {@link loadNamedTokenizer} for a command line's `--tokenizer` flag (the gateway's and the
 * UI's): every error names the flag, and the name when the directory itself is bad.
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * import { loadTokenizerFlag } from "./run_tokenizer.ts";
 * await assert.rejects(loadTokenizerFlag("gpt"), /^Error: --tokenizer: expected char, qwen3/);
 * ```
 */
export async function loadTokenizerFlag(name: string): Promise<ChatTokenizer> {
  try {
    return await loadNamedTokenizer(name);
  } catch (error) {
    const message = (error as Error).message;
    throw new Error(
      message.startsWith("tokenizer: ") ? `--${message}` : `--tokenizer: ${name}: ${message}`,
    );
  }
}

async function isFile(path: string): Promise<boolean> {
  try {
    return (await Deno.stat(path)).isFile;
  } catch {
    return false;
  }
}

async function readConfig(runDir: string): Promise<Record<string, unknown> | null> {
  try {
    const value = JSON.parse(await Deno.readTextFile(join(runDir, "config.json")));
    return value && typeof value === "object" && !Array.isArray(value) ? value : null;
  } catch {
    return null;
  }
}

interface ProbeCall {
  ids: number[];
  response: number[];
  text: string | null;
}

async function probeCalls(store: Store, limit: number): Promise<ProbeCall[]> {
  const out: ProbeCall[] = [];
  const page = await store.listRollouts({ limit: Math.max(limit, 50), order: "desc" });
  for (const r of page.items) {
    if (out.length >= limit) break;
    const [e] = await store.listEvents(r.rollout_id, { type: "model_request", limit: 1 });
    if (!e || e.type !== "model_request") continue;
    const p = e.payload;
    out.push({
      ids: [...p.prompt_token_ids, ...p.response_token_ids],
      response: [...p.response_token_ids],
      text: p.response_text ?? null,
    });
  }
  return out;
}

function maxId(calls: readonly ProbeCall[]): number {
  let max = -1;
  for (const c of calls) for (const id of c.ids) if (id > max) max = id;
  return max;
}

/**
 * Finds the run's tokenizer (see the module doc for the order of the rules).
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * import { detectRunTokenizer } from "./run_tokenizer.ts";
 * const runDir = await Deno.makeTempDir();
 * await Deno.writeTextFile(`${runDir}/config.json`, JSON.stringify({ tokenizer: "char" }));
 * const found = await detectRunTokenizer({ runDir });
 * assert.equal(found.name, "char");
 * assert.match(found.reason, /config\.json/);
 * await Deno.remove(runDir, { recursive: true });
 * ```
 */
export async function detectRunTokenizer(source: RunTokenizerSource): Promise<RunTokenizer> {
  const { runDir, store } = source;
  if (runDir && await isFile(join(runDir, "tokenizer.json"))) {
    return {
      tokenizer: await loadHfTokenizerFromDir(runDir),
      name: runDir,
      reason: `${join(runDir, "tokenizer.json")}`,
    };
  }
  const config = runDir ? await readConfig(runDir) : null;
  if (typeof config?.tokenizer === "string") {
    return {
      tokenizer: await loadNamedTokenizer(config.tokenizer),
      name: config.tokenizer,
      reason: `${join(runDir!, "config.json")} tokenizer`,
    };
  }
  const model = config?.model as { kind?: string; path?: string; config?: { vocab_size?: number } };
  if (model?.kind === "hf" && model.path && await isFile(join(model.path, "tokenizer.json"))) {
    return {
      tokenizer: await loadHfTokenizerFromDir(model.path),
      name: model.path,
      reason: `${join(runDir!, "config.json")} model.path`,
    };
  }
  if (store) {
    const calls = await probeCalls(store, source.probeCalls ?? 24);
    if (calls.length) {
      const highest = maxId(calls);
      const withText = calls.filter((c) => c.text !== null && c.response.length > 0);
      for (const name of ["char", "qwen3"]) {
        const tokenizer = await BUILTIN_TOKENIZERS[name]();
        if (highest >= tokenizer.vocabSize) continue;
        // The stored text leaves out the end-of-turn token that ends the ids.
        const exact = withText.filter((c) => {
          const decoded = tokenizer.decode(c.response);
          return decoded === c.text || (c.text !== "" && decoded.startsWith(c.text!));
        }).length;
        if (withText.length && exact * 2 < withText.length) continue;
        return {
          tokenizer,
          name,
          reason: `stored calls: ${calls.length} read, every token id < ${tokenizer.vocabSize}` +
            (withText.length
              ? `, ${exact} of ${withText.length} responses decode to their stored text`
              : ""),
        };
      }
    }
  }
  const charVocab = (await loadCharTokenizer()).vocabSize;
  if (model?.kind === "builtin" && model.config?.vocab_size === charVocab) {
    return {
      tokenizer: await loadCharTokenizer(),
      name: "char",
      reason: `${join(runDir!, "config.json")} model.config.vocab_size = ${charVocab}`,
    };
  }
  return {
    tokenizer: null,
    name: "none",
    reason: "no tokenizer.json, no tokenizer in config.json, no stored calls that decide",
  };
}
