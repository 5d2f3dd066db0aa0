/**
 * `deno task check:python` holds the Python to a linter (ruff, wasm) and a type checker
 * (pyright): the linter finds a planted finding with the repository's settings, honours the
 * per-file ignores, and the committed Python is clean.
 */
import assert from "node:assert/strict";
import { parse } from "smol-toml";
import { ruffFindings } from "../scripts/check_python.ts";

const config = parse(await Deno.readTextFile(new URL("../pyproject.toml", import.meta.url)));

Deno.test("check:python: ruff finds planted findings with the repository's settings", () => {
  const planted = [
    "import os",
    "def f(x):",
    "    try:",
    "        return int(x)",
    "    except ValueError:",
    '        raise KeyError("x")',
    "",
  ].join("\n");
  const findings = ruffFindings([{ path: "lib/planted.py", text: planted }], config);
  assert.ok(findings.some((f) => f.startsWith("lib/planted.py:1:") && f.includes("F401")));
  assert.ok(findings.some((f) => f.includes("B904")), findings.join("\n"));
});

Deno.test("check:python: per-file ignores apply to the task repositories only", () => {
  const style = "def f(d):\n    try:\n        del d[1]\n    except KeyError:\n        pass\n";
  const inTask = ruffFindings([{ path: "data/envs/coding/repos/x/y.py", text: style }], config);
  const inLib = ruffFindings([{ path: "lib/y.py", text: style }], config);
  assert.deepEqual(inTask, []);
  assert.ok(inLib.some((f) => f.includes("SIM105")), inLib.join("\n"));
});
