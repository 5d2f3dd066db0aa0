/**
 * Notebooks: the checks behind `deno task notebooks` (every figure cell comes back with its
 * image, a rerun prints nothing the committed outputs lack) and `deno task notebooks:check`
 * (sources unchanged since `--write`, the canaries of the results it reads reproduce; a change of
 * the imported code is a note), on synthetic notebooks; then one real headless run of
 * `retokenization_paths` when Jupyter is installed. `deno task notebooks` runs all of them (CI).
 */
import assert from "node:assert/strict";
import {
  checkNotebook,
  type CodeFingerprint,
  figureCells,
  missingFigures,
  type Notebook,
  notebookImports,
  outputDrift,
  type ReadResultState,
  ROOT,
  sourcesHash,
  staleReasons,
} from "../scripts/notebook_meta.ts";

function notebook(figureOutput: boolean): Notebook {
  return {
    metadata: {},
    cells: [
      { cell_type: "markdown", source: "# t" },
      { cell_type: "code", source: 'import { plot } from "../lib/plot/mod.ts";', outputs: [] },
      {
        cell_type: "code",
        source: ["const f = plot({});\n", 'await saveFigure(f, "f");\n', "await f.display();"],
        outputs: figureOutput
          ? [{ output_type: "display_data", data: { "image/svg+xml": "<svg/>" } }]
          : [{ output_type: "execute_result", data: { "text/plain": "Figure <svg>" } }],
      },
    ],
  };
}

const code = (hash: string, files: Record<string, string>): CodeFingerprint => ({
  hash,
  files,
  npm: [],
});

Deno.test("notebooks: a figure cell without an image is reported", () => {
  assert.deepEqual(figureCells(notebook(true)), [2]);
  assert.deepEqual(missingFigures(notebook(true)), []);
  assert.deepEqual(missingFigures(notebook(false)), [2], "text/plain alone is no figure");
});

Deno.test("notebooks: current means sources and imported code unchanged since --write", async () => {
  const path = `${ROOT}/notebooks/t.ipynb`;
  assert.deepEqual(notebookImports(notebook(true), path), [`${ROOT}/lib/plot/mod.ts`]);
  const now = code("h1", { "lib/plot/mod.ts": "a", "lib/plot/figure.ts": "b" });
  const fingerprint = () => Promise.resolve(now);
  const nb = notebook(true);
  assert.match((await staleReasons(nb, path, fingerprint))[0], /no outputs stamp/);

  nb.metadata.reins = { sources_sha256: sourcesHash(nb), code: now, written_by: "test" };
  assert.deepEqual(await staleReasons(nb, path, fingerprint), []);

  const edited = structuredClone(nb);
  edited.cells[1].source = 'import { plot } from "../lib/plot/mod.ts"; // edited';
  assert.deepEqual(await staleReasons(edited, path, fingerprint), [
    "cell sources changed since the outputs were written",
  ]);

  // A change of the imported code is a note, not a failure: `deno task notebooks` reruns the
  // notebook and compares its outputs.
  const changed = () =>
    Promise.resolve(code("h2", { "lib/plot/mod.ts": "a", "lib/plot/figure.ts": "c" }));
  assert.deepEqual(await staleReasons(nb, path, changed), []);
  assert.deepEqual((await checkNotebook(nb, path, changed)).notes, [
    "code changed since the outputs were written: lib/plot/figure.ts (`deno task notebooks` " +
    "reruns it and compares its outputs)",
  ]);

  const noImage = notebook(false);
  noImage.metadata.reins = { sources_sha256: sourcesHash(noImage), code: now, written_by: "t" };
  assert.deepEqual(await staleReasons(noImage, path, fingerprint), [
    "figure cell(s) 2 without an image",
  ]);
});

Deno.test("notebooks: a result set whose canary differs fails the check; a stale one is a note", async () => {
  const path = `${ROOT}/notebooks/t.ipynb`;
  const now = code("h1", { "lib/plot/mod.ts": "a" });
  const nb = notebook(true);
  nb.metadata.reins = { sources_sha256: sourcesHash(nb), code: now, written_by: "test" };
  nb.metadata.reins_results = ["grid", "pilot"];
  const states: Record<string, ReadResultState> = {
    grid: { state: "stale", canary_failed: true, reason: "the canary differs at outputs.loss" },
    pilot: { state: "stale", canary_failed: false, reason: "no canary recorded" },
  };
  const check = await checkNotebook(
    nb,
    path,
    () => Promise.resolve(now),
    (name) => Promise.resolve(states[name]),
  );
  assert.deepEqual(check.failures, ["results grid: the canary differs at outputs.loss"]);
  assert.deepEqual(check.notes, ["results pilot shown as stale: no canary recorded"]);
});

Deno.test("notebooks: a rerun that prints a line the committed outputs lack has drifted", () => {
  const cell = (text: string, tags: string[] = []) => ({
    cell_type: "code",
    source: "x",
    metadata: { tags },
    outputs: [{ output_type: "stream", text }],
  });
  const committed: Notebook = {
    metadata: {},
    cells: [cell("share 0.125\n\u001b[32mok\u001b[39m\n"), cell("took 3 s", ["measured"])],
  };
  assert.deepEqual(outputDrift(committed, committed), []);
  const rerun: Notebook = {
    metadata: {},
    cells: [cell("share 0.125\nok\n"), cell("took 9 s", ["measured"])],
  };
  assert.deepEqual(outputDrift(committed, rerun), [], "colours, measured cells, same lines");
  const dropped: Notebook = { metadata: {}, cells: [cell("ok\n"), cell("")] };
  assert.deepEqual(outputDrift(committed, dropped), [], "a dropped line is no drift");
  const moved: Notebook = { metadata: {}, cells: [cell("share 0.126\nok\n"), cell("")] };
  assert.deepEqual(outputDrift(committed, moved), [{ cell: 0, line: "share 0.126" }]);
});

async function jupyterAvailable(): Promise<boolean> {
  try {
    const out = await new Deno.Command("jupyter", {
      args: ["nbconvert", "--version"],
      stdout: "null",
      stderr: "null",
    }).output();
    return out.success;
  } catch {
    return false;
  }
}

Deno.test({
  name: "notebooks: retokenization_paths runs headless and its figure cell has its image",
  ignore: !(await jupyterAvailable()),
  sanitizeResources: false,
  fn: async () => {
    const out = await Deno.makeTempDir({ prefix: "reins_nb_" });
    try {
      const run = await new Deno.Command(Deno.execPath(), {
        args: ["run", "-A", `${ROOT}/scripts/run_notebooks.ts`, "--out", out, "retokenization"],
        cwd: ROOT,
        stdout: "piped",
        stderr: "piped",
        env: { REINS_FIGURES_DIR: out },
      }).output();
      const text = new TextDecoder().decode(run.stdout) + new TextDecoder().decode(run.stderr);
      assert.ok(run.success, text);
      assert.match(text, /1\/1 notebooks ran clean/);
      const nb = JSON.parse(await Deno.readTextFile(`${out}/retokenization_paths.ipynb`));
      assert.deepEqual(missingFigures(nb), []);
      assert.equal(figureCells(nb).length, 1);
    } finally {
      await Deno.remove(out, { recursive: true });
    }
  },
});
