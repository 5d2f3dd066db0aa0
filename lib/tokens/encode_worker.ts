/**
 * A tokenizer on another thread: encodes long texts without holding the caller's event loop.
 * Tokenizing 1 MB of prompt takes ~2 s of CPU; on the gateway's thread that froze every
 * request for as long (issue #29). The worker loads its own copy of the tokenizer from where
 * the caller's was loaded ({@link HfChatTokenizer.origin}), so its ids are the same.
 *
 * The thread starts at {@link EncodeWorker.warm} or the first text (starting a thread holds the
 * caller ~0.1–0.4 s on a loaded machine, so the proxy warms it at the first prompt of a few KB,
 * before one is long enough to need it); it loads its copy of the tokenizer (memory, a second
 * or two of CPU) at the first text. Runs through `node:worker_threads` so that it can
 * be unref'd while idle: a proxy nobody closes does not keep its process alive.
 *
 * @module
 */
import { isMainThread, parentPort, Worker, workerData } from "node:worker_threads";
import { HfChatTokenizer, type HfTokenizerOrigin, loadHfTokenizerFromDir } from "./hf.ts";
import type { ChatTokenizer } from "./types.ts";

interface EncodeRequest {
  id: number;
  text: string;
}
type EncodeReply = { id: number; ids: Uint32Array } | { id: number; error: string };

/** Encodes texts on a worker thread with a copy of one tokenizer. */
export interface EncodeWorker {
  /** The ids `tokenizer.encode(text)` gives, computed on the worker. */
  encode(text: string): Promise<Uint32Array>;
  /** Starts the worker now (it loads its tokenizer) instead of at the first {@link encode}. */
  warm(): void;
  /** Stops the worker; pending encodes fail. */
  close(): Promise<void>;
}

/**
 * An {@link EncodeWorker} for `tokenizer`, or `null` when no other thread can load it (a
 * tokenizer built from objects rather than read from a directory).
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * import { loadCharTokenizer } from "./char.ts";
 * import { encodeWorkerFor } from "./encode_worker.ts";
 * const tokenizer = await loadCharTokenizer();
 * const worker = encodeWorkerFor(tokenizer)!;
 * const text = "<|im_start|>user\nhello<|im_end|>";
 * assert.deepEqual(await worker.encode(text), tokenizer.encode(text));
 * await worker.close();
 * ```
 */
export function encodeWorkerFor(tokenizer: ChatTokenizer): EncodeWorker | null {
  const origin = tokenizer instanceof HfChatTokenizer ? tokenizer.origin : undefined;
  if (!origin) return null;
  let worker: Worker | null = null;
  let nextId = 0;
  const pending = new Map<
    number,
    { resolve: (ids: Uint32Array) => void; reject: (err: Error) => void }
  >();
  const failAll = (err: Error) => {
    for (const { reject } of pending.values()) reject(err);
    pending.clear();
  };
  const start = (): Worker => {
    if (worker) return worker;
    const started = new Worker(new URL(import.meta.url), { workerData: origin });
    started.unref();
    started.on("message", (reply: EncodeReply) => {
      const waiter = pending.get(reply.id);
      if (!waiter) return;
      pending.delete(reply.id);
      if ("error" in reply) waiter.reject(new Error(`tokenizer worker: ${reply.error}`));
      else waiter.resolve(reply.ids);
      if (pending.size === 0) started.unref();
    });
    const gone = (err: Error) => {
      if (worker === started) worker = null; // the next encode starts a fresh one
      failAll(err);
    };
    started.on("error", (err: Error) => gone(new Error(`tokenizer worker: ${err.message}`)));
    started.on("exit", () => gone(new Error("tokenizer worker: exited")));
    worker = started;
    return started;
  };
  return {
    encode(text) {
      const target = start();
      const id = nextId++;
      const { promise, resolve, reject } = Promise.withResolvers<Uint32Array>();
      pending.set(id, { resolve, reject });
      // Referenced while it owes an answer: an awaited encode keeps the process alive.
      target.ref();
      target.postMessage({ id, text } satisfies EncodeRequest);
      return promise;
    },
    warm() {
      start();
    },
    async close() {
      const running = worker;
      worker = null;
      if (running) await running.terminate();
      failAll(new Error("tokenizer worker: closed"));
    },
  };
}

/** The worker's side: load the tokenizer once, then answer each text with its ids. */
function runWorker(
  port: NonNullable<typeof parentPort>,
  origin: HfTokenizerOrigin,
): void {
  // Loaded at the first text: a thread started ahead of need costs no tokenizer memory.
  let loading: Promise<HfChatTokenizer> | undefined;
  port.on("message", async ({ id, text }: EncodeRequest) => {
    try {
      loading ??= loadHfTokenizerFromDir(new URL(origin.dir), origin.options);
      const ids = (await loading).encode(text);
      port.postMessage({ id, ids } satisfies EncodeReply, [ids.buffer as ArrayBuffer]);
    } catch (err) {
      const error = err instanceof Error ? err.message : String(err);
      port.postMessage({ id, error } satisfies EncodeReply);
    }
  });
}

if (!isMainThread && parentPort && (workerData as HfTokenizerOrigin | undefined)?.dir) {
  runWorker(parentPort, workerData as HfTokenizerOrigin);
}
