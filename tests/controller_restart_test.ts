import assert from "node:assert/strict";
import { GatewayClient } from "../lib/gateway/client.ts";
import { startGateway } from "../lib/gateway/server.ts";
import type { Rollout } from "../lib/schema.ts";
import { waitFor } from "./support/wait.ts";

const CLI = new URL("../bin/controller.ts", import.meta.url).pathname;

/**
 * Records when each attempt starts and beats every 100 ms, so overlaps can be checked. A retry
 * runs RETRY_BEATS beats, so a first attempt can outlive a slow controller restart on a loaded
 * machine without making the retry slow.
 */
const HARNESS = `
[ -e "$STATE/$REINS_ROLLOUT_ID.starts" ] && BEATS=$RETRY_BEATS
echo "$REINS_ATTEMPT_ID $(date +%s%N)" >> "$STATE/$REINS_ROLLOUT_ID.starts"
i=0
while [ $i -lt $BEATS ]; do
  date +%s%N > "$STATE/$REINS_ROLLOUT_ID.$REINS_ATTEMPT_ID.hb"
  echo "beat $i"
  sleep 0.1
  i=$((i + 1))
done
# Held until the test releases it (when RELEASE names a file): a process that finished while no
# controller ran is reconciled, not adopted, and a loaded machine may start a controller slowly.
if [ -n "$RELEASE" ]; then while [ ! -e "$RELEASE" ]; do sleep 0.05; done; fi
echo finished
`;

/** A controller process (the CLI), so that it can be SIGKILLed like a crashed one. */
class ControllerProcess {
  readonly #child: Deno.ChildProcess;
  readonly #output: Promise<string>;
  readonly #ready: Promise<void>;

  constructor(gatewayUrl: string, apiKey: string, root: string, leaseMs: number) {
    this.#child = new Deno.Command(Deno.execPath(), {
      args: [
        "run",
        "-A",
        CLI,
        "--gateway",
        gatewayUrl,
        "--api-key",
        apiKey,
        "--backend",
        "local",
        "--worker",
        "ctl-restart",
        "--root",
        root,
        "--concurrency",
        "6",
        "--lease-ms",
        String(leaseMs),
        "--poll-ms",
        "50",
      ],
      stdout: "null",
      stderr: "piped",
    }).spawn();
    let markReady!: () => void;
    this.#ready = new Promise((r) => markReady = r);
    const stderr = this.#child.stderr;
    this.#output = (async () => {
      let text = "";
      for await (const chunk of stderr.pipeThrough(new TextDecoderStream())) {
        text += chunk;
        if (text.includes("] ready: ")) markReady();
      }
      return text;
    })();
  }

  ready(): Promise<void> {
    return this.#ready;
  }

  async kill(signal: Deno.Signal): Promise<string> {
    this.#child.kill(signal);
    await this.#child.status;
    return await this.#output;
  }
}

async function rollouts(client: GatewayClient): Promise<Rollout[]> {
  return (await client.listRollouts({ limit: 100 })).items;
}

/** [start, last heartbeat] of each attempt of a rollout, in ns. */
async function intervals(
  state: string,
  rolloutId: string,
): Promise<Array<[string, bigint, bigint]>> {
  const starts = (await Deno.readTextFile(`${state}/${rolloutId}.starts`)).trim().split("\n");
  return await Promise.all(starts.map(async (line) => {
    const [attempt, start] = line.split(" ");
    const beat = (await Deno.readTextFile(`${state}/${rolloutId}.${attempt}.hb`)).trim();
    return [attempt, BigInt(start), BigInt(beat)] as [string, bigint, bigint];
  }));
}

async function setup(beats: number, maxAttempts: number, retryBeats = beats, release = "") {
  const dir = await Deno.makeTempDir();
  const state = `${dir}/state`;
  await Deno.mkdir(state);
  const gw = await startGateway({ db: `${dir}/gateway.db`, leaseSweepMs: 100 });
  const client = new GatewayClient(gw.url, { apiKey: gw.adminKey });
  await client.createRollouts([1, 2, 3, 4, 5, 6].map((i) => ({
    rollout_id: `k${i}`,
    input: { i },
    config: {
      timeout_s: 60,
      max_attempts: maxAttempts,
      harness: {
        name: "command",
        options: {
          command: ["sh", "-c", HARNESS],
          env: {
            STATE: state,
            BEATS: String(beats),
            RETRY_BEATS: String(retryBeats),
            RELEASE: release ? `${dir}/${release}` : "",
          },
        },
      },
    },
  })));
  return { dir, state, gw, client };
}

async function allRunningWithBeat(client: GatewayClient, state: string) {
  const all = await rollouts(client);
  if (!all.every((r) => r.status === "running")) return false;
  for (const r of all) {
    try {
      await Deno.stat(`${state}/${r.rollout_id}.${r.attempts.at(-1)!.attempt_id}.hb`);
    } catch {
      return false;
    }
  }
  return true;
}

Deno.test("restart: a controller SIGKILLed mid-run is restarted and re-adopts its live attempts", async () => {
  const { dir, state, gw, client } = await setup(15, 2, 15, "release");
  const first = new ControllerProcess(gw.url, gw.adminKey, `${dir}/ctl`, 10_000);
  await first.ready();
  await waitFor(() => allRunningWithBeat(client, state), 15_000, "six running attempts");
  // Some output is already posted when the controller dies: the next one must resume after it.
  await waitFor(
    async () => {
      for (const r of await rollouts(client)) {
        if ((await client.listEvents(r.rollout_id, { type: "log" })).length === 0) return false;
      }
      return true;
    },
    10_000,
    "the first log lines",
  );
  await first.kill("SIGKILL");
  const second = new ControllerProcess(gw.url, gw.adminKey, `${dir}/ctl`, 10_000);
  await second.ready();
  await Deno.writeTextFile(`${dir}/release`, "");
  const done = await waitFor(
    async () => {
      const all = await rollouts(client);
      return all.every((r) => r.status === "succeeded") && all;
    },
    20_000,
    "every rollout to succeed",
  );
  const log = await second.kill("SIGTERM");
  assert.match(log, /adopted k1\//);
  for (const r of done) {
    assert.equal(r.attempts.length, 1, `${r.rollout_id} ran once, adopted, not restarted`);
    // The log, streamed by two controllers, holds every line exactly once.
    const events = await client.listEvents(r.rollout_id, { type: "log" });
    const text = events.map((e) => e.type === "log" ? e.payload.text : "").join("");
    const expected = Array.from({ length: 15 }, (_, i) => `beat ${i}\n`).join("") + "finished\n";
    assert.equal(text, expected, r.rollout_id);
  }
  await gw.close();
  await Deno.remove(dir, { recursive: true });
});

Deno.test("restart: after the lease expired, the orphans are killed before the retry starts", async () => {
  const { dir, state, gw, client } = await setup(300, 2, 50);
  const first = new ControllerProcess(gw.url, gw.adminKey, `${dir}/ctl`, 1500);
  await first.ready();
  await waitFor(() => allRunningWithBeat(client, state), 15_000, "six running attempts");
  await first.kill("SIGKILL");
  // Nobody renews: the gateway gives the attempts up (lost) and requeues the rollouts,
  // while the orphaned harness processes are still running.
  await waitFor(
    async () => {
      const all = await rollouts(client);
      return all.every((r) => r.status === "requeuing");
    },
    10_000,
    "the leases to expire",
  );
  const second = new ControllerProcess(gw.url, gw.adminKey, `${dir}/ctl`, 3000);
  await second.ready();
  const done = await waitFor(
    async () => {
      const all = await rollouts(client);
      return all.every((r) => r.status === "succeeded") && all;
    },
    30_000,
    "every rollout to succeed on its second attempt",
  );
  const log = await second.kill("SIGTERM");
  assert.match(log, /stopping k1\/\S+: the gateway no longer runs it here/);
  for (const r of done) {
    assert.deepEqual(r.attempts.map((a) => a.status), ["lost", "succeeded"], r.rollout_id);
    const [[, , oldBeat], [, newStart]] = await intervals(state, r.rollout_id);
    assert.ok(oldBeat < newStart, `${r.rollout_id}: the orphan stopped before the retry began`);
  }
  await gw.close();
  await Deno.remove(dir, { recursive: true });
});
