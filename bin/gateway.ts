/**
 * Command line entry of the gateway:
 *
 * ```sh
 * deno task gateway --db runs/x.db --port 8420
 * deno task gateway --postgres postgres://user@host/db --port 8420
 * deno task gateway --db runs/x.db --upstream http://127.0.0.1:8300 --tokenizer qwen3
 * ```
 *
 * With `--upstream` the proxy is served at `/proxy` (the policy behind it: the reins worker or
 * SGLang, token level, or a vLLM-style server with `--upstream-kind openai_compatible`), rendering
 * prompts with `--tokenizer` (`qwen3`, `char`, or a directory holding `tokenizer.json` and
 * `tokenizer_config.json`). The Live UI is served at `/ui` unless `--no-ui`.
 *
 * The admin key comes from `$REINS_ADMIN_KEY`, else from `--admin-key-file` (created with a
 * fresh random key when missing), else from `<db>.key` next to the SQLite file (or
 * `runs/gateway.key`). Only the key's source is printed, never the key, unless `--print-key`.
 * A reporter key (rewards from a verifier outside the sandbox) comes from
 * `$REINS_REPORTER_KEY` or `--reporter-key-file`; there is none unless one is given.
 *
 * `--upstream-timeout-ms` and `--upstream-retries` bound how long a proxied call may wait for
 * the policy (per try, and tries after the first); `--headers-timeout-ms`,
 * `--body-timeout-ms`, `--idle-timeout-ms` and `--max-concurrent-per-token` set the server's
 * deadlines and caps (see `docs/security.md`).
 *
 * @module
 */
import { intFlag, parseFlags, portFlag } from "../lib/flags.ts";
import { dirname } from "node:path";
import { UpstreamConfigSchema, UpstreamKindSchema } from "../lib/schema.ts";
import { readOrNewKey } from "../lib/http/credentials.ts";
import { startStack } from "../lib/stack/stack.ts";
import { BUILTIN_TOKENIZERS, loadTokenizerFlag } from "../lib/ui/run_tokenizer.ts";
import { monitorsWithModules } from "../lib/monitors/module.ts";

const USAGE = `usage: deno task gateway [--db FILE | --postgres URL] [--port N] [--host H]
  [--admin-key-file FILE] [--reporter-key-file FILE] [--print-key]
  [--synchronous FULL|NORMAL] [--lease-sweep-ms N]
  [--upstream URL ... [--upstream-kind token_level|sglang|openai_compatible]
   [--upstream-timeout-ms N] [--upstream-retries N]]
  [--headers-timeout-ms N] [--body-timeout-ms N] [--idle-timeout-ms N]
  [--max-concurrent-per-token N] [--max-connections N] [--max-connections-per-client N]
  [--tokenizer qwen3|char|DIR] [--no-ui] [--monitors-module FILE]...
  --monitors-module FILE  also run the monitors FILE's monitors() returns in the UI's monitor
                          runner, on the checking thread under the time budget (repeatable)`;

/**
 * Runs the gateway until SIGINT/SIGTERM.
 *
 * @example
 * ```ts ignore
 * // Serves a gateway until SIGINT/SIGTERM (so not run as a doc test).
 * import { main } from "./gateway.ts";
 * await main(["--db", "runs/demo.db", "--port", "0"]);
 * ```
 */
export async function main(args: string[]): Promise<void> {
  const values = parseFlags(
    args,
    {
      db: { type: "string" },
      postgres: { type: "string" },
      port: { type: "string", default: "8420" },
      host: { type: "string", default: "127.0.0.1" },
      "admin-key-file": { type: "string" },
      "reporter-key-file": { type: "string" },
      "upstream-timeout-ms": { type: "string" },
      "upstream-retries": { type: "string" },
      "headers-timeout-ms": { type: "string" },
      "body-timeout-ms": { type: "string" },
      "idle-timeout-ms": { type: "string" },
      "max-concurrent-per-token": { type: "string" },
      "max-connections": { type: "string" },
      "max-connections-per-client": { type: "string" },
      "print-key": { type: "boolean", default: false },
      synchronous: { type: "string", default: "FULL" },
      "lease-sweep-ms": { type: "string", default: "1000" },
      upstream: { type: "string", multiple: true },
      "upstream-kind": { type: "string", default: "token_level" },
      tokenizer: { type: "string", default: "qwen3" },
      "no-ui": { type: "boolean", default: false },
      "monitors-module": { type: "string", multiple: true },
    },
    USAGE,
  );
  if (!values) return;
  const port = portFlag(values.port);
  const synchronous = values.synchronous?.toUpperCase();
  if (synchronous !== "FULL" && synchronous !== "NORMAL") {
    throw new Error(`--synchronous: expected FULL or NORMAL, got '${values.synchronous}'`);
  }
  const leaseSweepMs = intFlag("lease-sweep-ms", values["lease-sweep-ms"], 0)!;
  const upstreamTimeoutMs = intFlag("upstream-timeout-ms", values["upstream-timeout-ms"], 1);
  const upstreamRetries = intFlag("upstream-retries", values["upstream-retries"], 0);
  const deadlines = Object.fromEntries(
    ([
      ["headers_timeout_ms", intFlag("headers-timeout-ms", values["headers-timeout-ms"], 1)],
      ["body_timeout_ms", intFlag("body-timeout-ms", values["body-timeout-ms"], 1)],
      ["idle_timeout_ms", intFlag("idle-timeout-ms", values["idle-timeout-ms"], 1)],
      [
        "max_concurrent_per_token",
        intFlag("max-concurrent-per-token", values["max-concurrent-per-token"], 1),
      ],
      ["max_connections", intFlag("max-connections", values["max-connections"], 1)],
      [
        "max_connections_per_client",
        intFlag("max-connections-per-client", values["max-connections-per-client"], 1),
      ],
    ] as const).filter(([, v]) => v !== undefined),
  );
  if (values.db && values.postgres) {
    throw new Error("--db and --postgres: give one store, not both");
  }
  const modules = values["monitors-module"] ?? [];
  if (modules.length && values["no-ui"]) {
    throw new Error("--monitors-module: the monitors run in the UI's runner; drop --no-ui");
  }
  // Loaded before anything is created: a broken module fails the start with no side effects.
  const monitors = modules.length ? await monitorsWithModules(modules) : undefined;
  const db = values.db ?? (values.postgres ? undefined : "runs/gateway.db");
  // Only the default location is created; a --db whose directory is missing is refused (by the
  // store, naming the directory) rather than silently created.
  if (db && !values.db) await Deno.mkdir(dirname(db), { recursive: true });
  // Key files are written only once the gateway has started: a failed start leaves none.
  const saves: Array<() => Promise<void>> = [];

  let adminKey = Deno.env.get("REINS_ADMIN_KEY");
  let keySource = "environment variable REINS_ADMIN_KEY";
  if (!adminKey) {
    const file = values["admin-key-file"] ??
      (db && db !== ":memory:" ? `${db}.key` : "runs/gateway.key");
    const read = await readOrNewKey(file);
    adminKey = read.key;
    saves.push(read.save);
    keySource = `file ${file} (export REINS_ADMIN_KEY=$(cat ${file}))`;
  }
  let reporterKey = Deno.env.get("REINS_REPORTER_KEY") || undefined;
  if (!reporterKey && values["reporter-key-file"]) {
    const read = await readOrNewKey(values["reporter-key-file"], "rp_");
    reporterKey = read.key;
    saves.push(read.save);
  }

  const upstreamKind = UpstreamKindSchema.safeParse(values["upstream-kind"]);
  if (!upstreamKind.success) {
    throw new Error(
      `--upstream-kind: expected ${UpstreamKindSchema.options.join(", ")}, ` +
        `got '${values["upstream-kind"]}'`,
    );
  }
  // The proxy needs its tokenizer before the first call; the UI only when a page decodes
  // tokens, so without a proxy a builtin one loads on first use (Qwen3's takes ~1.5 s of CPU at
  // every start otherwise). A directory is read now, so that a bad one fails the start.
  const tokenizerName = values.tokenizer ?? "qwen3";
  const eager = Boolean(values.upstream?.length) ||
    !Object.hasOwn(BUILTIN_TOKENIZERS, tokenizerName);
  const tokenizer = eager ? await loadTokenizerFlag(tokenizerName) : null;
  // The UI calls a loader once (again after a failure).
  const uiTokenizer = tokenizer ?? (() => loadTokenizerFlag(tokenizerName));
  if (values.upstream?.length) {
    for (const url of values.upstream) {
      if (!URL.canParse(url)) throw new Error(`--upstream: expected a URL, got '${url}'`);
    }
  }
  let stack;
  try {
    stack = await startStack({
      db,
      postgres: values.postgres,
      port,
      hostname: values.host,
      adminKey,
      ...(reporterKey ? { reporterKey } : {}),
      deadlines,
      sqlite: { synchronous },
      leaseSweepMs,
      ...(values.upstream?.length
        ? {
          proxy: {
            tokenizer: tokenizer!,
            upstream: {
              kind: upstreamKind.data,
              endpoints: values.upstream,
              ...(upstreamTimeoutMs === undefined ? {} : { timeout_ms: upstreamTimeoutMs }),
              ...(upstreamRetries === undefined ? {} : { max_retries: upstreamRetries }),
            },
          },
        }
        : {}),
      ...(values["no-ui"]
        ? {}
        : { ui: { tokenizer: uiTokenizer, ...(monitors ? { monitors } : {}) } }),
    });
  } catch (err) {
    throw new StartError(err instanceof Error ? err.message : String(err), { cause: err });
  }
  for (const save of saves) await save();
  const gateway = stack.gateway;
  const store = values.postgres ? "postgres" : `sqlite ${db}`;
  // One write, so that whoever waits for the banner (a supervisor, a test) reads it whole.
  const banner = [
    `reins gateway listening on ${gateway.url} (store: ${store})`,
    `admin key: ${values["print-key"] ? adminKey : keySource}`,
    `reporter key: ${reporterKey ? "set (rewards from outside the sandbox)" : "none"}`,
  ];
  if (values.upstream?.length) {
    const timeoutMs = upstreamTimeoutMs ?? UpstreamConfigSchema.shape.timeout_ms.parse(undefined);
    const retries = upstreamRetries ?? UpstreamConfigSchema.shape.max_retries.parse(undefined);
    banner.push(
      `proxy: ${gateway.url}/proxy/<rollout_id>/<attempt_id>/v1 -> ${values.upstream.join(", ")}` +
        ` (upstream timeout ${timeoutMs} ms per try, ${retries} retries)`,
    );
  } else {
    banner.push("proxy: off (give --upstream URL to serve harnesses)");
  }
  if (stack.ui) banner.push(`ui: ${gateway.url}/ui`);
  console.log(banner.join("\n"));

  const stopped = Promise.withResolvers<void>();
  const stop = () => stopped.resolve();
  Deno.addSignalListener("SIGINT", stop);
  Deno.addSignalListener("SIGTERM", stop);
  await stopped.promise;
  Deno.removeSignalListener("SIGINT", stop);
  Deno.removeSignalListener("SIGTERM", stop);
  await stack.close();
}

/** A failure to start with valid arguments (a store that cannot open): no usage after it. */
class StartError extends Error {}

if (import.meta.main) {
  try {
    await main(Deno.args);
  } catch (err) {
    // One line naming the flag or file; the usage is a `--help` away.
    console.error(`gateway: ${err instanceof Error ? err.message : err}`);
    if (err instanceof StartError) Deno.exit(1);
    Deno.exit(2);
  }
}
