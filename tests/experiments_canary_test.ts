/**
 * Issue #27: results stay valid while the code moves. In a fresh clone of this commit, an
 * unrelated export added to a service module leaves every notebook and result set current; a
 * change to the numerics (the normalization code) fails the canary of the results that depend
 * on it, naming the first number that moved and the file. Plus the canary comparison and the
 * state machine of `resultStatus` on a tiny repository.
 */
import assert from "node:assert/strict";
import { firstDifference, MECHANISM_CANARY } from "../experiments/canary.ts";
import { REPO_ROOT, writeProvenance } from "../experiments/provenance.ts";
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

Deno.test("results: current → confirmed by the canary (recorded) → stale when the canary differs", async () => {
  const root = await Deno.makeTempDir({ prefix: "reins_status_" });
  try {
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
    const exact = (outputs: unknown) => (record: { outputs: unknown }) =>
      Promise.resolve({
        exact: firstDifference(record.outputs, outputs, "outputs") === null,
        difference: firstDifference(record.outputs, outputs, "outputs"),
        seconds: 0.1,
        runtime_changed: "",
        runtime,
        git,
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
