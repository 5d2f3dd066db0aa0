/**
 * Every command line answers alike (issue 32): `--help` prints its usage and exits 0, an unknown
 * flag is refused on one line that names it, with exit status 2, before any work starts.
 */
import assert from "node:assert/strict";

/** The command lines: each script in scripts/ and bin/ run by a user, and the experiments'. */
export const CLIS = [
  "bin/controller.ts",
  "bin/gateway.ts",
  "bin/ui.ts",
  "scripts/check_python.ts",
  "scripts/curate.ts",
  "scripts/demo.ts",
  "scripts/engine.ts",
  "scripts/emit_contract.ts",
  "scripts/ensure_deps.ts",
  "scripts/export.ts",
  "scripts/chaos.ts",
  "scripts/train.ts",
  "scripts/make_char_tokenizer.ts",
  "scripts/make_env_data.ts",
  "scripts/make_tasks.ts",
  "scripts/policy.ts",
  "scripts/run_cli.ts",
  "scripts/run_notebooks.ts",
  "scripts/splits.ts",
  "experiments/ablation.ts",
  "experiments/mechanism.ts",
  "experiments/report.ts",
  "experiments/testbed_torch.ts",
];

async function run(script: string, args: string[]) {
  const out = await new Deno.Command(Deno.execPath(), {
    args: ["run", "-A", script, ...args],
    stdout: "piped",
    stderr: "piped",
    env: { NO_COLOR: "1" },
  }).output();
  const text = (b: Uint8Array) => new TextDecoder().decode(b);
  return { code: out.code, stdout: text(out.stdout), stderr: text(out.stderr) };
}

Deno.test("the CLI list holds every script with a main in scripts/ and bin/", async () => {
  for (const dir of ["scripts", "bin"]) {
    for await (const e of Deno.readDir(dir)) {
      if (!e.name.endsWith(".ts")) continue;
      const text = await Deno.readTextFile(`${dir}/${e.name}`);
      const isCli = /import\.meta\.main|Deno\.args/.test(text) &&
        !/^ \* Not a command line/m.test(text);
      if (isCli) assert.ok(CLIS.includes(`${dir}/${e.name}`), `${dir}/${e.name} is a CLI`);
    }
  }
});

for (const script of CLIS) {
  Deno.test(`${script}: --help exits 0 with usage; a bad flag exits 2 naming it`, async () => {
    const help = await run(script, ["--help"]);
    assert.equal(help.code, 0, `${script} --help: ${help.stderr}`);
    assert.match(help.stdout, /usage:/i, script);
    const bad = await run(script, ["--no-such-flag"]);
    assert.equal(bad.code, 2, `${script} --no-such-flag: ${bad.stdout}${bad.stderr}`);
    const lines = bad.stderr.trim().split("\n");
    assert.match(lines.at(-1)!, /--no-such-flag/, script);
    assert.doesNotMatch(bad.stderr, /^\s+at /m, `${script}: no stack trace`);
  });
}

Deno.test("curate checks its inputs before the sandboxed stages", async () => {
  const started = performance.now();
  const bad = await run("scripts/curate.ts", ["--quick", "--checkpoint", "nope.pt"]);
  assert.equal(bad.code, 2);
  assert.equal(bad.stderr.trim(), "curate: --checkpoint: nope.pt does not exist (see --help)");
  assert.doesNotMatch(bad.stderr, /tests|probe/, "no stage ran");
  assert.ok(performance.now() - started < 60_000);
});
