/**
 * Command lines refuse bad flags before doing anything, naming the flag: the real scripts run
 * as a user runs them.
 */
import assert from "node:assert/strict";

async function run(script: string, args: string[]): Promise<{ code: number; stderr: string }> {
  const out = await new Deno.Command(Deno.execPath(), {
    args: ["run", "-A", script, ...args],
    stdout: "null",
    stderr: "piped",
  }).output();
  return { code: out.code, stderr: new TextDecoder().decode(out.stderr) };
}

Deno.test("ensure_deps: an unknown dependency in --only is refused naming the flag", async () => {
  const { code, stderr } = await run("scripts/ensure_deps.ts", ["--only", "torch,cuda"]);
  assert.notEqual(code, 0);
  assert.match(stderr, /--only: unknown dependency 'cuda'/);
});

Deno.test("ensure_deps: an unknown flag is refused naming it", async () => {
  const { code, stderr } = await run("scripts/ensure_deps.ts", ["--chek"]);
  assert.notEqual(code, 0);
  assert.match(stderr, /--chek/);
});

Deno.test("gateway and ui CLIs: a bad port or an unknown flag is refused naming it", async () => {
  for (const script of ["bin/gateway.ts", "bin/ui.ts"]) {
    const port = await run(script, ["--db", ":memory:", "--port", "99999"]);
    assert.notEqual(port.code, 0, script);
    assert.match(port.stderr, /--port: expected a port number, got '99999'/, script);
    const unknown = await run(script, ["--prot", "1"]);
    assert.notEqual(unknown.code, 0, script);
    assert.match(unknown.stderr, /--prot/, script);
  }
});
