/**
 * Memory of a gateway process under the two connection attacks of issue #16, measured as the
 * child's resident set (VmRSS from /proc) before, at the peak and after:
 *
 * - an endless chunked body to `/proxy` (sent until the server answers or drops it);
 * - N half-sent requests (half of them half a head, half a whole head and half a body).
 *
 * ```sh
 * deno run -A benches/security.ts [--body-mb 300] [--connections 500]
 * ```
 *
 * Prints `name: value` lines.
 *
 * @module
 */
import { parseArgs } from "node:util";
import { sleep } from "../lib/util/time.ts";
import { GatewayClient } from "../lib/gateway/client.ts";
import { startScriptedUpstream } from "../lib/proxy/scripted_upstream.ts";
import { loadCharTokenizer } from "../lib/tokens/char.ts";
import { spawnProxyGateway } from "../tests/support/gateway_process.ts";
import { readAll, writeAll } from "../tests/support/raw_conn.ts";

const { values } = parseArgs({
  args: Deno.args,
  options: {
    "body-mb": { type: "string", default: "300" },
    connections: { type: "string", default: "500" },
  },
  strict: true,
});
const bodyMb = Number(values["body-mb"]);
const connections = Number(values.connections);

const utf8 = new TextEncoder();

async function rssMb(pid: number): Promise<number> {
  const status = await Deno.readTextFile(`/proc/${pid}/status`);
  const kb = Number(/VmRSS:\s+(\d+)/.exec(status)?.[1] ?? NaN);
  return kb / 1024;
}

const dir = await Deno.makeTempDir({ prefix: "reins-bench-security-" });
const tokenizer = await loadCharTokenizer();
const upstream = await startScriptedUpstream({ tokenizer, policy: () => ({ content: "4" }) });
const key = "ra_bench_security_key";
/** A gateway CLI process with the proxy over the scripted policy. */
const spawn = (name: string, flags: string[]) =>
  spawnProxyGateway({
    db: `${dir}/${name}.db`,
    upstream: upstream.url,
    adminKey: key,
    flags: ["--no-ui", ...flags],
  });
// Default deadlines for the endless body (it must be cut by size, at 32 MiB) ...
const gw = await spawn("body", []);
// ... and 2 s deadlines for the half-open connections.
const gw2 = await spawn("conns", ["--headers-timeout-ms", "2000", "--body-timeout-ms", "2000"]);
const pid = gw.process.pid;
const port = Number(new URL(gw.url).port);
try {
  const admin = new GatewayClient(gw.url, { apiKey: key });
  await admin.createRollouts([{ rollout_id: "b", input: {} }]);
  const [{ attempt, token }] = await admin.claim({ worker: "w", limit: 1 });

  // ---- endless body ------------------------------------------------------------------------
  const before = await rssMb(pid);
  let peak = before;
  const conn = await Deno.connect({ port });
  await writeAll(
    conn,
    utf8.encode(
      `POST /proxy/b/${attempt.attempt_id}/v1/chat/completions HTTP/1.1\r\nhost: x\r\n` +
        `authorization: Bearer ${token}\r\ntransfer-encoding: chunked\r\n\r\n`,
    ),
  );
  let answered = false;
  let answeredAt = 0;
  const answer = readAll(conn, () => {
    answered = true;
    answeredAt = performance.now();
  });
  const status = answer.then((text) => text.slice(9, 12));
  const chunk = utf8.encode(`10000\r\n${"x".repeat(0x10000)}\r\n`);
  let sent = 0;
  const started = performance.now();
  while (!answered && sent < bodyMb * 1024 * 1024) {
    try {
      await writeAll(conn, chunk);
    } catch {
      break;
    }
    sent += chunk.length;
    if ((sent / chunk.length) % 128 === 0) peak = Math.max(peak, await rssMb(pid));
  }
  const text = await Promise.race([answer, sleep(10_000).then(() => "")]);
  const cutMs = answeredAt - started;
  try {
    conn.close();
  } catch { /* closed by the server */ }
  peak = Math.max(peak, await rssMb(pid));
  await new Promise((r) => setTimeout(r, 1000));
  const after = await rssMb(pid);
  console.log(`endless_body_status: ${text ? await status : "(connection still open)"}`);
  if (Deno.env.get("DEBUG")) console.log(JSON.stringify(text.slice(0, 400)));
  console.log(`endless_body_sent_mb: ${(sent / 1024 / 1024).toFixed(1)}`);
  console.log(`endless_body_answer_ms: ${cutMs.toFixed(0)}`);
  console.log(`endless_body_connection_closed_by_server: ${text !== ""}`);
  console.log(`endless_body_rss_before_mb: ${before.toFixed(1)}`);
  console.log(`endless_body_rss_peak_mb: ${peak.toFixed(1)}`);
  console.log(`endless_body_rss_after_mb: ${after.toFixed(1)}`);

  // ---- half-open connections ---------------------------------------------------------------
  const pid2 = gw2.process.pid;
  const port2 = Number(new URL(gw2.url).port);
  const before2 = await rssMb(pid2);
  const closedAfter: Array<Promise<number>> = [];
  for (let i = 0; i < connections; i++) {
    const c = await Deno.connect({ port: port2 });
    await writeAll(
      c,
      utf8.encode(
        i % 2 === 0
          ? "POST /v1/rollouts HTTP/1.1\r\nhost: x\r\n"
          : `POST /v1/rollouts HTTP/1.1\r\nhost: x\r\nauthorization: Bearer ${key}\r\n` +
            `content-length: 2000000\r\n\r\n{"rollouts":[{"input":"${"y".repeat(1_000_000)}`,
      ),
    );
    const at = performance.now();
    closedAfter.push(
      readAll(c).then(() => {
        try {
          c.close();
        } catch { /* closed */ }
        return performance.now() - at;
      }),
    );
  }
  const peak2 = await rssMb(pid2);
  const closedAt = await Promise.all(closedAfter);
  await new Promise((r) => setTimeout(r, 1000));
  const after2 = await rssMb(pid2);
  console.log(`half_open_connections: ${connections}`);
  console.log(`half_open_closed: ${closedAt.length}`);
  console.log(`half_open_max_close_after_last_byte_ms: ${Math.max(...closedAt).toFixed(0)}`);
  console.log(`half_open_deadlines_ms: headers 2000, body 2000 (+2000 grace)`);
  console.log(`half_open_rss_before_mb: ${before2.toFixed(1)}`);
  console.log(`half_open_rss_peak_mb: ${peak2.toFixed(1)}`);
  console.log(`half_open_rss_after_mb: ${after2.toFixed(1)}`);
} finally {
  await gw.stop("SIGTERM");
  await gw2.stop("SIGTERM");
  await upstream.close();
  await Deno.remove(dir, { recursive: true });
}
