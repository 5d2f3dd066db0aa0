/**
 * Environment 2: questions answered from a small local corpus through a `search` tool (the
 * Search-R1 shape: one- and two-hop questions); normalised exact-match reward.
 *
 * @module
 */
import { type SearchDoc, SearchDocSchema, type SearchTask, SearchTaskSchema } from "../schema.ts";
import { type AgentTool, stringArg } from "../builtin/tool.ts";
import { Bm25Index } from "./bm25.ts";
import { DEFAULT_DATA_DIR, type HarnessEnv, normalizeAnswer, readJsonl } from "./common.ts";
import { defineAnswerEnv } from "./define.ts";

const indexes = new Map<string, { docs: SearchDoc[]; index: Bm25Index }>();

/** The corpus of `dataDir` with its BM25 index (built once per process). */
export function searchCorpus(dataDir = DEFAULT_DATA_DIR): { docs: SearchDoc[]; index: Bm25Index } {
  let entry = indexes.get(dataDir);
  if (!entry) {
    const docs = readJsonl(`${dataDir}/search/corpus.jsonl`, SearchDocSchema);
    entry = { docs, index: new Bm25Index(docs.map((d) => `${d.title} ${d.title} ${d.text}`)) };
    indexes.set(dataDir, entry);
  }
  return entry;
}

/** The `search` tool: the top `k` (default 3, at most 10) documents for a query. */
export function searchTool(dataDir = DEFAULT_DATA_DIR): AgentTool {
  return {
    name: "search",
    description: "Searches the encyclopedia and returns the best matching documents.",
    parameters: {
      type: "object",
      properties: {
        query: { type: "string", description: "Keywords to search for." },
        k: { type: "integer", description: "How many documents (1-10, default 3)." },
      },
      required: ["query"],
    },
    run: (args) => {
      const query = stringArg(args, "query");
      const k = typeof args.k === "number" ? Math.min(10, Math.max(1, Math.floor(args.k))) : 3;
      const { docs, index } = searchCorpus(dataDir);
      const hits = index.search(query, k);
      if (hits.length === 0) return "no results";
      return hits.map((h) => `[${docs[h.index].id}] ${docs[h.index].title}: ${docs[h.index].text}`)
        .join("\n");
    },
  };
}

/**
 * True when `answer` matches the task's answer or an alias after normalisation.
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * import { searchMatch } from "./search.ts";
 * assert.equal(searchMatch("the Pelfen.", { answer: "Pelfen", aliases: [] }), true);
 * ```
 */
export function searchMatch(answer: string, task: Pick<SearchTask, "answer" | "aliases">): boolean {
  const got = normalizeAnswer(answer);
  return [task.answer, ...task.aliases].some((a) => normalizeAnswer(a) === got);
}

const SYSTEM = "You answer questions about a fictional world using the search tool over its " +
  "encyclopedia. Search as often as you need (questions may need two searches). Reply with " +
  "the final answer inside <answer></answer>: only the name or number, nothing else.";

/**
 * The search environment over `dataDir/search/{corpus,tasks}.jsonl`.
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * import { searchEnv } from "./search.ts";
 * const env = searchEnv();
 * assert.equal(env.tools({ workdir: ".", input: {} })[0].name, "search");
 * ```
 */
export function searchEnv(dataDir = DEFAULT_DATA_DIR): HarnessEnv<SearchTask> {
  return defineAnswerEnv({
    name: "search",
    description: "questions over a local corpus with a BM25 search tool; exact-match reward",
    systemPrompt: SYSTEM,
    dataDir,
    taskSchema: SearchTaskSchema,
    tools: () => [searchTool(dataDir)],
    match: (answer, task) => searchMatch(answer, task),
    // The harness finds the corpus of a non-default dataset here (the sandbox masks only the
    // tasks file, with the answers; the corpus stays readable).
    prepare: () => dataDir === DEFAULT_DATA_DIR ? {} : { env: { REINS_ENV_DATA_DIR: dataDir } },
  });
}
