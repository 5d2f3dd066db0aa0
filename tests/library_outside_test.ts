/**
 * reins used from outside its checkout, as docs/library.md says: a project folder with a
 * `deno.json` that links the checkout imports `@reins/reins` and its area entry points; and a
 * notebook the Live UI exported runs where it is saved (no reins `deno.json` around it).
 */
import assert from "node:assert/strict";
import { fileURLToPath } from "node:url";
import { openSqliteStore } from "../lib/gateway/sqlite_store.ts";
import { exportRollout, rolloutNotebook } from "../lib/ui/export.ts";

const REPO = fileURLToPath(new URL("../", import.meta.url)).replace(/\/$/, "");

async function deno(cwd: string, args: string[], env: Record<string, string> = {}) {
  const out = await new Deno.Command(Deno.execPath(), {
    args,
    cwd,
    env,
    stdout: "piped",
    stderr: "piped",
  }).output();
  return {
    code: out.code,
    stdout: new TextDecoder().decode(out.stdout),
    stderr: new TextDecoder().decode(out.stderr),
  };
}

Deno.test("a project outside the checkout imports reins through a linked deno.json", async () => {
  const dir = await Deno.makeTempDir({ prefix: "reins_outside_" });
  try {
    // The recipe of docs/library.md, word for word but the path.
    await Deno.writeTextFile(
      `${dir}/deno.json`,
      JSON.stringify({ imports: { "@reins/reins": "jsr:@reins/reins@^0.1.0" }, links: [REPO] }),
    );
    await Deno.writeTextFile(
      `${dir}/main.ts`,
      `import { parseOrThrow } from "@reins/reins";
import { fmtSig } from "@reins/reins/ui";
import { computeAdvantages } from "@reins/reins/algo";
console.log(typeof parseOrThrow, fmtSig(-0.0000231), typeof computeAdvantages);
`,
    );
    const run = await deno(dir, ["run", "-A", "main.ts"]);
    assert.equal(run.code, 0, run.stderr);
    assert.equal(run.stdout.trim(), "function -2.31e-5 function");
    // Without the recipe, the failure the issue reports: reins' bare imports do not resolve.
    await Deno.remove(`${dir}/deno.json`);
    await Deno.writeTextFile(
      `${dir}/bare.ts`,
      `import { parseOrThrow } from "${REPO}/mod.ts";\nconsole.log(typeof parseOrThrow);\n`,
    );
    const bare = await deno(dir, ["run", "-A", "bare.ts"]);
    assert.notEqual(bare.code, 0);
    assert.match(bare.stderr, /not a dependency/);
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
});

Deno.test("an exported notebook runs where it is saved", async () => {
  const dir = await Deno.makeTempDir({ prefix: "reins_notebook_" });
  const store = openSqliteStore(":memory:");
  try {
    await store.createRollouts([{ rollout_id: "nb1", input: { q: "2+2" } }]);
    const [claim] = await store.claimRollouts({ worker: "w", limit: 1, lease_ms: 60_000 });
    await store.appendEvents("nb1", claim.attempt.attempt_id, [{
      type: "model_request",
      payload: {
        flavor: "openai_chat",
        prompt_token_ids: [1, 2, 3],
        response_token_ids: [4, 5],
        response_logprobs: [-0.1, -0.2],
        policy_version: 0,
      },
    }]);
    const doc = await exportRollout(store, "nb1", { strategy: "prefix_merge" });
    await Deno.writeTextFile(`${dir}/nb1.json`, JSON.stringify(doc));
    const notebook = rolloutNotebook("http://127.0.0.1:1", "/ui", "nb1");
    await Deno.writeTextFile(`${dir}/nb1.ipynb`, JSON.stringify(notebook));
    // The notebook's code cells, as the kernel runs them, from the folder it was saved in.
    const cells = (notebook.cells as { cell_type: string; source: string[] }[])
      .filter((c) => c.cell_type === "code").map((c) => c.source.join(""));
    await Deno.writeTextFile(
      `${dir}/cells.ts`,
      `${cells.join("\n")}\nconsole.log(JSON.stringify(metrics));\n`,
    );
    const run = await deno(dir, ["run", "-A", "cells.ts"], {
      REINS_ROLLOUT_EXPORT: `${dir}/nb1.json`,
    });
    assert.equal(run.code, 0, run.stderr);
    const metrics = JSON.parse(run.stdout.trim().split("\n").at(-1)!);
    assert.equal(metrics.calls, 1, run.stdout);
  } finally {
    await store.close();
    await Deno.remove(dir, { recursive: true });
  }
});
