/**
 * Issue #27: results stay valid while the code moves. In a fresh clone of this commit, an
 * unrelated export added to a service module leaves every notebook and result set current; a
 * change to the numerics (the normalization code) fails the canary of the results that depend
 * on it, naming the first number that moved and the file. Plus the canary comparison and the
 * state machine of `resultStatus` on a tiny repository.
 */
import assert from "node:assert/strict";
import {
  type CanaryRecord,
  compareWithReferences,
  firstDifference,
  MECHANISM_CANARY,
  readCanary,
  TORCH_CANARY,
} from "../experiments/canary.ts";
import { canaryAtCommit, recordPlatform } from "../experiments/canary_platform.ts";
import {
  REPO_ROOT,
  type Runtime,
  runtimeInfo,
  writeProvenance,
} from "../experiments/provenance.ts";
import { recordConfirmation, resultStatus } from "../experiments/results_status.ts";

async function run(cwd: string, args: string[]): Promise<{ ok: boolean; text: string }> {
  const out = await new Deno.Command(Deno.execPath(), {
    args,
    cwd,
    stdout: "piped",
    stderr: "piped",
  }).output();
  const d = new TextDecoder();
  return { ok: out.success, text: d.decode(out.stdout) + d.decode(out.stderr) };
}

async function freshClone(): Promise<{ dir: string; [Symbol.asyncDispose](): Promise<void> }> {
  const parent = await Deno.makeTempDir({ prefix: "reins_clone_" });
  const dir = `${parent}/reins`;
  const clone = await new Deno.Command("git", {
    args: ["clone", "--quiet", REPO_ROOT, dir],
    stdout: "null",
    stderr: "piped",
  }).output();
  assert.ok(clone.success, new TextDecoder().decode(clone.stderr));
  // A clone has no node_modules, and nodeModulesDir is manual: install as a user would.
  const install = await run(dir, ["install", "-q"]);
  assert.ok(install.ok, install.text);
  return {
    dir,
    [Symbol.asyncDispose]: () => Deno.remove(parent, { recursive: true }),
  };
}

Deno.test({
  name:
    "canaries: an unrelated lib/ change leaves results and notebooks current; a numerics change fails the canary naming the file",
  sanitizeResources: false,
  fn: async () => {
    await using clone = await freshClone();
    const k8s = `${clone.dir}/lib/controller/k8s_backend.ts`;
    await Deno.writeTextFile(
      k8s,
      (await Deno.readTextFile(k8s)) +
        "\n/** Unrelated to any result. */\nexport const UNRELATED = 1;\n",
    );
    const results = await run(clone.dir, ["run", "-A", "experiments/results_status.ts"]);
    assert.ok(results.ok, results.text);
    // Every result set is current or confirmed, except the legacy pilot record (produced by
    // earlier code, no canary: shown stale, never failed).
    const staleLines = results.text.split("\n").filter((l) => l.startsWith("STALE"));
    assert.deepEqual(
      staleLines.map((l) => l.split(/\s+/)[1]),
      staleLines.length ? ["experiments/results/ablation_pilot:"] : [],
      results.text,
    );
    assert.match(results.text, / 0 canaries differ/);
    const notebooks = await run(clone.dir, ["run", "-A", "scripts/run_notebooks.ts", "--check"]);
    assert.ok(notebooks.ok, notebooks.text);
    assert.match(notebooks.text, /(\d+)\/\1 notebooks current/);

    const norm = `${clone.dir}/lib/algo/normalization.ts`;
    const source = await Deno.readTextFile(norm);
    const edited = source.replace(
      "return 1 / (nRollouts * (rolloutTokens.get(s.rollout_id) as number));",
      "return 1.001 / (nRollouts * (rolloutTokens.get(s.rollout_id) as number));",
    );
    assert.notEqual(edited, source, "the edit applies");
    await Deno.writeTextFile(norm, edited);
    const stale = await run(clone.dir, [
      "run",
      "-A",
      "experiments/results_status.ts",
      "experiments/results/mechanism_quick",
    ]);
    assert.equal(stale.ok, false, stale.text);
    assert.match(
      stale.text,
      /STALE +experiments\/results\/mechanism_quick: the canary differs at outputs\[\d+\]\.\w+.*: recorded [-\d.e]+, now [-\d.e]+; files changed since the results: .*lib\/algo\/normalization\.ts/,
    );
  },
});

Deno.test("canaries: the first difference is exact and named by its path", () => {
  assert.equal(firstDifference([{ loss: 0.5 }], [{ loss: 0.5 }]), null);
  assert.equal(
    firstDifference({ steps: [{ loss: 0.5 }] }, { steps: [{ loss: 0.5000000000000001 }] }, "o"),
    "o.steps[0].loss: recorded 0.5, now 0.5000000000000001",
  );
  assert.equal(firstDifference(0, -0), "(root): recorded 0, now 0", "-0 differs from 0");
  assert.equal(firstDifference([1, 2], [1]), "(root): recorded 2 items, now 1");
});

/**
 * A tiny repository (root): `experiments/a.ts` imports `lib/algo/b.ts` (`b = 1`), and a result
 * set (dir) whose provenance fingerprints them.
 */
async function tinyResultSet(prefix: string): Promise<{ root: string; dir: string }> {
  const root = await Deno.makeTempDir({ prefix });
  await Deno.mkdir(`${root}/experiments`);
  await Deno.mkdir(`${root}/lib/algo`, { recursive: true });
  await Deno.writeTextFile(
    `${root}/experiments/a.ts`,
    'import { b } from "../lib/algo/b.ts";\nconsole.log(b);\n',
  );
  await Deno.writeTextFile(`${root}/lib/algo/b.ts`, "export const b = 1;\n");
  const dir = `${root}/results/x`;
  await writeProvenance(dir, {
    command: "deno run experiments/a.ts",
    config: {},
    code: { entries: ["experiments/a.ts"] },
  }, root);
  return { root, dir };
}

Deno.test("results: current → confirmed by the canary (recorded) → stale when the canary differs", async () => {
  const { root, dir } = await tinyResultSet("reins_status_");
  try {
    const runtime = JSON.parse(await Deno.readTextFile(`${dir}/provenance.json`)).runtime;
    const git = { commit: null, dirty: false, diff_sha256: null };
    const canary = (outputs: unknown) =>
      Deno.writeTextFile(
        `${dir}/canary.json`,
        JSON.stringify({
          spec: MECHANISM_CANARY,
          outputs,
          seconds: 1,
          git,
          runtime,
          recorded_at: "2026-12-02T00:00:00Z",
        }),
      );
    // The rerun on this machine, compared as `rerunCanary` compares (the test's runtime is the
    // recording's: the same platform).
    const exact = (outputs: unknown) => (record: CanaryRecord) =>
      Promise.resolve({
        ...compareWithReferences(record, outputs, runtime),
        seconds: 0.1,
        runtime,
        git,
        outputs,
      });
    await canary({ loss: [0.25, 0.5] });
    const options = { root, cache: false, rerun: exact({ loss: [0.25, 0.5] }) };
    assert.equal((await resultStatus(dir, options)).state, "current");

    await Deno.writeTextFile(`${root}/lib/algo/b.ts`, "export const b = 2;\n");
    const confirmed = await resultStatus(dir, options);
    assert.equal(confirmed.state, "confirmed");
    assert.match(confirmed.reason, /changed: lib\/algo\/b\.ts.*reproduced every recorded number/);
    assert.equal(await recordConfirmation(confirmed, root), true);
    const again = await resultStatus(dir, { ...options, rerun: () => Promise.reject("not rerun") });
    assert.equal(again.state, "confirmed", "a recorded confirmation of this code is taken as is");

    await Deno.writeTextFile(`${root}/lib/algo/b.ts`, "export const b = 3;\n");
    const stale = await resultStatus(dir, { ...options, rerun: exact({ loss: [0.25, 0.75] }) });
    assert.equal(stale.state, "stale");
    assert.equal(stale.canary_failed, true);
    assert.match(
      stale.reason,
      /the canary differs at outputs\.loss\[1\]: recorded 0\.5, now 0\.75; files changed since the results: lib\/algo\/b\.ts/,
    );
  } finally {
    await Deno.remove(root, { recursive: true });
  }
});

Deno.test("results: a canary is checked against its own platform's reference; elsewhere it is unchecked until the vouched commit computes one", async () => {
  const { root, dir } = await tinyResultSet("reins_platform_");
  try {
    // The results' code was confirmed on a clean commit (the one a reference is computed at).
    const provenance = JSON.parse(await Deno.readTextFile(`${dir}/provenance.json`));
    const git = { commit: null, dirty: false, diff_sha256: null };
    provenance.confirmations.push({
      git: { commit: "c0ffee0", dirty: false, diff_sha256: null },
      code_hash: provenance.code.hash,
      changed: [],
      runtime: provenance.runtime,
      at: "2026-12-02T00:00:00Z",
    });
    await Deno.writeTextFile(`${dir}/provenance.json`, JSON.stringify(provenance));
    // Recorded before the CPU kind was: a legacy recording, of no known platform.
    const legacy: Runtime = { ...provenance.runtime, cpu: null };
    await Deno.writeTextFile(
      `${dir}/canary.json`,
      JSON.stringify({
        spec: TORCH_CANARY,
        outputs: { entropy: [0.148] },
        seconds: 1,
        git,
        runtime: legacy,
        recorded_at: "2026-12-02T00:00:00Z",
      }),
    );
    // This machine computes other numbers with the same code (as an AVX-512 Xeon did: canary.ts).
    const here = await runtimeInfo(root);
    assert.ok(here.cpu, "this machine's CPU kind is read from /proc/cpuinfo");
    const on = (runtime: Runtime, outputs: unknown) => (record: CanaryRecord) =>
      Promise.resolve({
        ...compareWithReferences(record, outputs, runtime),
        seconds: 0.1,
        runtime,
        git,
      });
    const options = { root, cache: false, alwaysCanary: true };

    const unchecked = await resultStatus(dir, {
      ...options,
      rerun: on(here, { entropy: [0.197] }),
    });
    assert.equal(unchecked.state, "current", "same code: the result stays current");
    assert.equal(unchecked.canary_failed, false, "a CPU never seen is not a failure");
    assert.equal(unchecked.unchecked, true);
    assert.ok(
      unchecked.reason.includes(
        `cannot be checked on this platform (${here.cpu}): no reference was recorded on it, and ` +
          `it differs from the recording (runtime: cpu unrecorded → ${here.cpu}) at ` +
          "outputs.entropy[0]: recorded 0.148, now 0.197",
      ),
      unchecked.reason,
    );

    const ran: string[] = [];
    const runAt = (commit: string) => {
      ran.push(commit);
      return Promise.resolve({ entropy: [0.197] });
    };
    assert.match(
      await recordPlatform(dir, { root, runAt }),
      /recorded this platform's reference in .*canary\.json \(computed at c0ffee0/,
    );
    assert.deepEqual(ran, ["c0ffee0"], "computed by the vouched commit, not by this checkout");
    const record = (await readCanary(dir))!;
    assert.equal(record.platforms.length, 1);
    assert.deepEqual(record.platforms[0].outputs, { entropy: [0.197] });
    assert.equal(record.platforms[0].git.commit, "c0ffee0");
    assert.deepEqual(record.outputs, { entropy: [0.148] }, "the recording is kept as it was");
    assert.match(await recordPlatform(dir, { root, runAt }), /^nothing to record: this platform/);
    assert.equal(ran.length, 1);

    const exact = await resultStatus(dir, { ...options, rerun: on(here, { entropy: [0.197] }) });
    assert.equal(exact.canary?.exact, true, exact.reason);
    // A code change that moves this platform's numbers now fails here.
    await Deno.writeTextFile(`${root}/lib/algo/b.ts`, "export const b = 2;\n");
    const failed = await resultStatus(dir, { ...options, rerun: on(here, { entropy: [0.2] }) });
    assert.equal(failed.state, "stale");
    assert.equal(failed.canary_failed, true);
    assert.match(
      failed.reason,
      /differs at outputs\.entropy\[0\]: recorded 0\.197, now 0\.2; files changed .*lib\/algo\/b\.ts \(compared with the platform /,
    );
    // On a CPU kind with no reference, changed and unconfirmed code is shown stale, not failed.
    const kindC: Runtime = { ...here, cpu: "Kind C (asimd)" };
    const third = await resultStatus(dir, { ...options, rerun: on(kindC, { entropy: [0.3] }) });
    assert.equal(third.state, "stale");
    assert.equal(third.canary_failed, false);
    assert.equal(third.unchecked, true);
  } finally {
    await Deno.remove(root, { recursive: true });
  }
});

Deno.test({
  name:
    "canaries: a reference is computed in a clean clone of the vouched commit (HEAD reproduces the mechanism recording)",
  sanitizeResources: false,
  fn: async () => {
    const head = new TextDecoder().decode(
      (await new Deno.Command("git", { args: ["rev-parse", "HEAD"], cwd: REPO_ROOT }).output())
        .stdout,
    ).trim();
    const record = (await readCanary(`${REPO_ROOT}/experiments/results/mechanism_quick`))!;
    const outputs = await canaryAtCommit(head, record.spec);
    assert.equal(firstDifference(record.outputs, outputs, "outputs"), null);
  },
});
