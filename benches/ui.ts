/**
 * Live UI benchmark: the rollout list page with 100,000 rollouts in a SQLite store (server-side
 * paging), over HTTP through the gateway, with the admin key.
 *
 * Prints `ui_list_page_ms: <median ms>` (first page, 50 rows) and further figures: a deep page
 * (via the cursor), store-side and post-filtered lists, the detail page, and the overview's
 * first load (the UI index reading the whole change feed once).
 *
 * Run: `deno run -A benches/ui.ts [--rollouts 100000] [--repeats 20]`
 *
 * @module
 */
import { parseArgs } from "node:util";
import { startStack } from "../lib/stack/stack.ts";
import { openSqliteStore } from "../lib/gateway/sqlite_store.ts";

const { values: flags } = parseArgs({
  args: Deno.args,
  options: { rollouts: { type: "string" }, repeats: { type: "string" } },
  strict: true,
});

function arg(name: "rollouts" | "repeats", fallback: number): number {
  const value = flags[name];
  return value === undefined ? fallback : Number(value);
}

const ROLLOUTS = arg("rollouts", 100_000);
const REPEATS = arg("repeats", 20);
const FINISHED = Math.min(ROLLOUTS, 2_000);
const KEY = "bench-admin-key";

function median(values: number[]): number {
  const sorted = [...values].sort((a, b) => a - b);
  return sorted[Math.floor(sorted.length / 2)];
}

const dir = await Deno.makeTempDir({ prefix: "reins_ui_bench_" });
const store = openSqliteStore(`${dir}/ui.db`);
const fillStart = performance.now();
for (let start = 0; start < ROLLOUTS; start += 1_000) {
  const batch = [];
  for (let i = start; i < Math.min(ROLLOUTS, start + 1_000); i++) {
    batch.push({
      rollout_id: `r${String(i).padStart(6, "0")}`,
      group_id: `g${Math.floor(i / 8)}`,
      input: { task: i % 97 },
      labels: { step: String(Math.floor(i / 1_000)), harness: i % 3 ? "calc" : "swe" },
    });
  }
  await store.createRollouts(batch);
}
// Finish some so that status and reward filters have something to find.
for (let done = 0; done < FINISHED; done += 250) {
  const claimed = await store.claimRollouts({ worker: "bench", limit: 250, lease_ms: 600_000 });
  for (const { rollout, attempt } of claimed) {
    const n = Number(rollout.rollout_id.slice(1));
    await store.appendEvents(rollout.rollout_id, attempt.attempt_id, [
      { type: "reward", payload: { value: n % 4 === 0 ? 1 : 0 } },
    ]);
    await store.transition(rollout.rollout_id, { to: n % 5 === 0 ? "failed" : "succeeded" });
  }
}
const fillMs = performance.now() - fillStart;

const stack = await startStack({
  store,
  adminKey: KEY,
  leaseSweepMs: 0,
  ui: { monitors: false, indexPollMs: 3_600_000 },
});
const gw = stack.gateway;
const headers = { authorization: `Bearer ${KEY}` };

async function timed(path: string): Promise<{ ms: number; text: string }> {
  const t0 = performance.now();
  const res = await fetch(`${gw.url}/ui${path}`, { headers });
  const text = await res.text();
  const ms = performance.now() - t0;
  if (res.status !== 200) throw new Error(`${path}: HTTP ${res.status}: ${text.slice(0, 300)}`);
  return { ms, text };
}

async function measure(path: string): Promise<{ median: number; text: string }> {
  const times: number[] = [];
  let text = "";
  for (let i = 0; i < REPEATS; i++) {
    const r = await timed(path);
    times.push(r.ms);
    text = r.text;
  }
  return { median: median(times), text };
}

try {
  // The overview's first load reads the whole change feed into the UI index (once).
  const overviewFirst = await timed("/");
  const overview = await measure("/fragments/overview");

  const first = await measure("/rollouts");
  const rows = (first.text.match(/data-rollout="/g) ?? []).length;
  if (rows !== 50) throw new Error(`first page: expected 50 rows, got ${rows}`);

  // A deep page: follow the cursor to around the middle of the store.
  let cursor: string | null = null;
  const jump = Math.floor(ROLLOUTS / 2 / 500);
  for (let i = 0; i < jump; i++) {
    const res: Response = await fetch(
      `${gw.url}/ui/api/rollouts?limit=500${cursor ? `&after=${encodeURIComponent(cursor)}` : ""}`,
      { headers },
    );
    const page: { next: string | null } = await res.json();
    cursor = page.next;
  }
  const deep = await measure(`/rollouts?after=${encodeURIComponent(cursor ?? "")}`);
  const byStatus = await measure("/rollouts?status=failed");
  const byStep = await measure(`/rollouts?step=${Math.floor(ROLLOUTS / 1_000) - 1}`);
  const postFiltered = await measure("/rollouts?reward_min=1&harness=swe");
  const newest = await measure("/rollouts?order=newest");
  const detail = await measure("/rollouts/r000004");
  // Sorted by reward (reads the newest 5,000 matches and pages by key); text search reads the
  // events of up to 1,000 rollouts per page (the input holds the task number).
  const sorted = await measure("/rollouts?sort=-reward");
  const search = await measure(`/rollouts?q=${encodeURIComponent('"task":96')}`);
  const runs = await measure("/runs");

  console.log(`rollouts: ${ROLLOUTS} (${FINISHED} finished), fill ${(fillMs / 1000).toFixed(1)} s`);
  console.log(`ui_list_page_ms: ${first.median.toFixed(1)}`);
  console.log(`ui_list_deep_page_ms: ${deep.median.toFixed(1)}`);
  console.log(`ui_list_status_filter_ms: ${byStatus.median.toFixed(1)}`);
  console.log(`ui_list_step_filter_ms: ${byStep.median.toFixed(1)}`);
  console.log(`ui_list_post_filter_ms: ${postFiltered.median.toFixed(1)}`);
  console.log(`ui_list_newest_page_ms: ${newest.median.toFixed(1)}`);
  console.log(`ui_detail_page_ms: ${detail.median.toFixed(1)}`);
  console.log(`ui_list_sorted_ms: ${sorted.median.toFixed(1)}`);
  console.log(`ui_list_search_ms: ${search.median.toFixed(1)}`);
  console.log(`ui_runs_page_ms: ${runs.median.toFixed(1)}`);
  console.log(`ui_overview_first_load_ms: ${overviewFirst.ms.toFixed(1)}`);
  console.log(`ui_overview_ms: ${overview.median.toFixed(1)}`);
} finally {
  await stack.close();
  await store.close();
  await Deno.remove(dir, { recursive: true });
}
