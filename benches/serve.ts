/**
 * The server's CPU per request of each way `serveGuarded` can serve, against `Deno.serve`: a
 * trivial JSON handler in a child process (one per engine, in alternation), a small POST from 64
 * concurrent clients in this one. The child's CPU (user + system, from `/proc/<pid>/stat`, so
 * Linux only) over the measured seconds, divided by the requests answered, is the engine's cost:
 * this process's load does not enter it.
 *
 * Usage: `deno task bench:serve [--rounds 2] [--seconds 3]`
 *
 * Prints every round, then `serve_cpu_us_per_request_<engine>: <median>` and
 * `serve_requests_per_s_<engine>: <median>` for `conn` (our engine), `node` (`node:http`) and
 * `deno` (`Deno.serve`, no deadlines: the floor).
 *
 * @module
 */
import { parseArgs } from "node:util";
import { serveGuarded } from "../lib/http/serve.ts";
import { cpuMsOf } from "../lib/http/lag.ts";
import { median } from "../lib/util/stats.ts";

const ENGINES = ["conn", "node", "deno"] as const;
type Engine = typeof ENGINES[number];

const { values: args } = parseArgs({
  args: Deno.args,
  options: {
    rounds: { type: "string", default: "2" },
    seconds: { type: "string", default: "3" },
    serve: { type: "string" },
  },
  strict: true,
});

const handler = async (request: Request) => {
  const body = request.method === "POST" ? await request.text() : "";
  return Response.json({ ok: true, bytes: body.length });
};

if (args.serve) {
  // The child: serve, print the port, and wait to be killed.
  const engine = args.serve as Engine;
  const port = engine === "deno"
    ? Deno.serve({ hostname: "127.0.0.1", port: 0, onListen() {} }, handler).addr.port
    : (await serveGuarded(handler, {
      hostname: "127.0.0.1",
      port: 0,
      engine,
      deadlines: {
        headers_timeout_ms: 10_000,
        body_timeout_ms: 10_000,
        idle_timeout_ms: 10_000,
        max_header_bytes: 65_536,
      },
    })).addr.port;
  console.log(`listening on ${port}`);
} else {
  await main();
}

/** The CPU seconds `pid` has used (user + system). */
function cpuSeconds(pid: number): number {
  const ms = cpuMsOf(`/proc/${pid}/stat`);
  if (ms === null) throw new Error(`bench:serve reads /proc/${pid}/stat (Linux only)`);
  return ms / 1000;
}

async function measure(engine: Engine, seconds: number) {
  const child = new Deno.Command(Deno.execPath(), {
    args: ["run", "-A", new URL(import.meta.url).pathname, "--serve", engine],
    stdout: "piped",
  }).spawn();
  const lines = child.stdout.pipeThrough(new TextDecoderStream()).getReader();
  let text = "";
  while (!/listening on (\d+)/.test(text)) {
    const { value, done } = await lines.read();
    if (done) throw new Error(`${engine}: the server exited: ${text}`);
    text += value;
  }
  const url = `http://127.0.0.1:${/listening on (\d+)/.exec(text)![1]}/v1/x`;
  const body = JSON.stringify({
    events: [{ type: "log", payload: { stream: "stdout", text: "step 1" } }],
  });
  const load = async (forSeconds: number) => {
    let answered = 0;
    const end = performance.now() + forSeconds * 1000;
    await Promise.all(Array.from({ length: 64 }, async () => {
      while (performance.now() < end) {
        const res = await fetch(url, {
          method: "POST",
          headers: { "content-type": "application/json", authorization: "Bearer bench" },
          body,
        });
        await res.arrayBuffer();
        answered++;
      }
    }));
    return answered;
  };
  try {
    await load(1);
    const cpu0 = cpuSeconds(child.pid);
    const t0 = performance.now();
    const answered = await load(seconds);
    const wall = (performance.now() - t0) / 1000;
    const cpu = cpuSeconds(child.pid) - cpu0;
    return { usPerRequest: (cpu / answered) * 1e6, perSecond: answered / wall };
  } finally {
    child.kill();
    await child.status;
    await lines.cancel();
  }
}

async function main() {
  const rounds = Number(args.rounds);
  const seconds = Number(args.seconds);
  const results: Record<Engine, Array<{ usPerRequest: number; perSecond: number }>> = {
    conn: [],
    node: [],
    deno: [],
  };
  console.log(
    `serve bench: ${rounds} round(s) of ${seconds} s per engine, 64 clients; load average ${
      Deno.loadavg().map((l) => l.toFixed(2)).join(" ")
    }`,
  );
  for (let round = 0; round < rounds; round++) {
    // Alternate the order so that no engine always runs first.
    const order = round % 2 === 0 ? [...ENGINES] : [...ENGINES].reverse();
    for (const engine of order) {
      const r = await measure(engine, seconds);
      results[engine].push(r);
      console.log(
        `round ${round + 1} ${engine.padEnd(4)}: ${r.usPerRequest.toFixed(1)} µs of server CPU ` +
          `per request, ${r.perSecond.toFixed(0)} requests/s`,
      );
    }
  }
  for (const engine of ENGINES) {
    const rs = results[engine];
    console.log(
      `serve_cpu_us_per_request_${engine}: ${median(rs.map((r) => r.usPerRequest)).toFixed(1)}`,
    );
    console.log(
      `serve_requests_per_s_${engine}: ${median(rs.map((r) => r.perSecond)).toFixed(0)}`,
    );
  }
}
