/**
 * The gateway's CPU per small event post, before and after a change, side by side: each
 * checkout's gateway CLI runs as a process of its own (started through that checkout's
 * `tests/support/gateway_process.ts`), in alternation (ABBA), and takes the same load, one event
 * per POST from 64 writers through this checkout's keep-alive HTTP client.
 *
 * Why CPU and not only the rate: on the 2-core development machine the rate of one event per
 * POST moves by a third between runs of the same code (the client, the gateway and PostgreSQL
 * share two cores), while the CPU the gateway's JavaScript thread spends per post, read from
 * `/proc/<pid>/task/<pid>/stat` over the measured window, moves by a few percent. That thread
 * is what bounds one event per POST: it runs the engine, the app and the store's statements,
 * and it was ~80% busy at ~3,500 events/s.
 *
 * Usage: `deno task bench:gateway:ab --before ../before [--after .] [--store sqlite|postgres]
 * [--rounds 3] [--seconds 4]` (a checkout as old as wave 1's, 6b98096, runs the same way). Linux
 * only (`/proc`). SQLite runs with `--synchronous FULL`; PostgreSQL with fsync on.
 *
 * Prints `name: value` lines, per store: `<store>_<before|after>_thread_us_per_event` (the
 * gateway's main thread: median of the rounds), `<store>_<side>_process_us_per_event` (every
 * thread of the gateway process: the checkpointer, the tokenizer, V8's GC helpers, blocking
 * I/O), `<store>_<side>_events_per_s` (median rate), each round's rates and thread figures as
 * `<store>_<side>_round_<n>_...`.
 *
 * @module
 */
import { parseArgs } from "node:util";
import { resolve } from "node:path";
import { pathToFileURL } from "node:url";
import { HttpClient } from "../lib/http/client.ts";
import { cpuMsOf } from "../lib/http/lag.ts";
import { median } from "../lib/util/stats.ts";
import { smallEvent } from "./gateway_events.ts";
import { startPostgres } from "../tests/support/postgres.ts";

const { values: args } = parseArgs({
  args: Deno.args,
  options: {
    before: { type: "string" },
    after: { type: "string", default: "." },
    store: { type: "string", default: "sqlite" },
    rounds: { type: "string", default: "3" },
    seconds: { type: "string", default: "4" },
  },
  strict: true,
});
if (!args.before) {
  console.error("--before: the checkout to compare with is required (e.g. a git worktree)");
  Deno.exit(2);
}
if (args.store !== "sqlite" && args.store !== "postgres") {
  console.error(`--store: expected 'sqlite' or 'postgres', got '${args.store}'`);
  Deno.exit(2);
}
const ROUNDS = Number(args.rounds);
const SECONDS = Number(args.seconds);
if (!Number.isInteger(ROUNDS) || ROUNDS < 1) {
  console.error(`--rounds: expected a positive integer, got '${args.rounds}'`);
  Deno.exit(2);
}
if (!(SECONDS >= 1)) {
  console.error(`--seconds: expected a number of at least 1, got '${args.seconds}'`);
  Deno.exit(2);
}
try {
  Deno.statSync("/proc/self/task");
} catch {
  console.error("bench:gateway:ab reads /proc/<pid>/task: Linux only");
  Deno.exit(2);
}

const ADMIN_KEY = "ra_bench_admin_key_0123456789";
const WRITERS = 64;
const WARMUP_MS = 1_000;
const sides = { before: resolve(args.before), after: resolve(args.after) };

/** CPU milliseconds of a process's threads, by thread id. */
function threadCpu(pid: number): Map<string, number> {
  const out = new Map<string, number>();
  for (const task of Deno.readDirSync(`/proc/${pid}/task`)) {
    const ms = cpuMsOf(`/proc/${pid}/task/${task.name}/stat`);
    if (ms !== null) out.set(task.name, ms); // null: the thread ended
  }
  return out;
}

function cpuSince(pid: number, before: Map<string, number>): { main: number; all: number } {
  let all = 0;
  const now = threadCpu(pid);
  for (const [tid, ms] of now) all += ms - (before.get(tid) ?? 0);
  return { main: (now.get(String(pid)) ?? 0) - (before.get(String(pid)) ?? 0), all };
}

/** The same mix as `bench:gateway`, one event per POST, each with its own key. */
function eventBody(writer: number, i: number): string {
  return JSON.stringify({ events: [{ ...smallEvent(writer, i), event_key: `e-${writer}-${i}` }] });
}

async function adminCall(url: string, path: string, body: unknown): Promise<unknown> {
  const res = await fetch(url + path, {
    method: "POST",
    headers: { authorization: `Bearer ${ADMIN_KEY}`, "content-type": "application/json" },
    body: JSON.stringify(body),
  });
  if (!res.ok) throw new Error(`${path}: ${res.status} ${await res.text()}`);
  return await res.json();
}

interface Round {
  eventsPerS: number;
  threadUs: number;
  processUs: number;
}

async function measure(root: string, storeArgs: string[]): Promise<Round> {
  const { spawnGatewayProcess } = await import(
    pathToFileURL(`${root}/tests/support/gateway_process.ts`).href
  );
  const gateway = await spawnGatewayProcess(
    ["--port", "0", "--lease-sweep-ms", "0", ...storeArgs],
    { REINS_ADMIN_KEY: ADMIN_KEY },
  );
  const pid: number = gateway.process.pid;
  const http = new HttpClient({ keepAlive: true, maxIdlePerOrigin: WRITERS, label: "gateway" });
  try {
    const ids = Array.from({ length: WRITERS }, (_, i) => `bench-${i}`);
    await adminCall(gateway.url, "/v1/rollouts", {
      rollouts: ids.map((rollout_id, i) => ({ rollout_id, input: i })),
    });
    // Wave 1 answered a claim with a bare list; later ones with `{ claimed }`.
    const answer = await adminCall(gateway.url, "/v1/rollouts/claim", {
      worker: "bench",
      limit: WRITERS,
    });
    const claimed =
      (Array.isArray(answer) ? answer : (answer as { claimed: unknown[] }).claimed) as Array<
        { rollout: { rollout_id: string }; attempt: { attempt_id: string } }
      >;
    if (claimed.length !== WRITERS) throw new Error(`claimed ${claimed.length} of ${WRITERS}`);
    const headers = {
      authorization: `Bearer ${ADMIN_KEY}`,
      "content-type": "application/json",
      prefer: "return=minimal",
    };
    const start = performance.now();
    const end = start + WARMUP_MS + SECONDS * 1000;
    let cpuAtWindow: Map<string, number> | null = null;
    let windowStart = 0;
    let counted = 0;
    await Promise.all(claimed.map(async ({ rollout, attempt }, writer) => {
      const path = `/v1/rollouts/${rollout.rollout_id}/attempts/${attempt.attempt_id}/events`;
      for (let i = 0; performance.now() < end; i++) {
        const res = await http.fetch(gateway.url + path, {
          method: "POST",
          headers,
          body: eventBody(writer, i),
        });
        if (!res.ok) throw new Error(`events: ${res.status} ${await res.text()}`);
        await res.arrayBuffer();
        const now = performance.now();
        if (cpuAtWindow === null && now - start >= WARMUP_MS) {
          cpuAtWindow = threadCpu(pid);
          windowStart = now;
        } else if (cpuAtWindow !== null) counted++;
      }
    }));
    const seconds = (performance.now() - windowStart) / 1000;
    const cpu = cpuSince(pid, cpuAtWindow!);
    return {
      eventsPerS: counted / seconds,
      threadUs: cpu.main * 1000 / counted,
      processUs: cpu.all * 1000 / counted,
    };
  } finally {
    await http.close();
    await gateway.stop("SIGTERM");
  }
}

const pg = args.store === "postgres" ? await startPostgres({ fsync: true }) : null;
const dir = await Deno.makeTempDir({ prefix: "reins-gateway-ab-" });
const results: Record<"before" | "after", Round[]> = { before: [], after: [] };
try {
  const [load1, load5] = Deno.loadavg();
  console.log(
    `gateway A/B: before ${sides.before}, after ${sides.after}; ${args.store}, ${ROUNDS} rounds ` +
      `of ${SECONDS} s, ${WRITERS} writers, one event per POST; load average ${load1.toFixed(2)} ${
        load5.toFixed(2)
      }`,
  );
  for (let round = 0; round < ROUNDS; round++) {
    const order = round % 2 === 0 ? (["before", "after"] as const) : (["after", "before"] as const);
    for (const side of order) {
      const storeArgs = pg
        ? ["--postgres", await pg.newDatabase()]
        : ["--db", `${dir}/${side}-${round}.db`, "--synchronous", "FULL"];
      const result = await measure(sides[side], storeArgs);
      results[side].push(result);
      const prefix = `${args.store}_${side}_round_${round + 1}`;
      console.log(`${prefix}_events_per_s: ${Math.round(result.eventsPerS)}`);
      console.log(`${prefix}_thread_us_per_event: ${result.threadUs.toFixed(1)}`);
    }
  }
  for (const side of ["before", "after"] as const) {
    const rounds = results[side];
    const prefix = `${args.store}_${side}`;
    console.log(
      `${prefix}_thread_us_per_event: ${median(rounds.map((r) => r.threadUs)).toFixed(1)}`,
    );
    console.log(
      `${prefix}_process_us_per_event: ${median(rounds.map((r) => r.processUs)).toFixed(1)}`,
    );
    console.log(`${prefix}_events_per_s: ${Math.round(median(rounds.map((r) => r.eventsPerS)))}`);
  }
} finally {
  await pg?.stop();
  await Deno.remove(dir, { recursive: true });
}
