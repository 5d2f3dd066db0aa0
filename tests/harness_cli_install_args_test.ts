/**
 * `deno run -A lib/harness/cli/install.ts [name…]` reads its arguments with `node:util`
 * `parseArgs`: a flag or an unknown CLI name is refused (exit 2, naming it) before anything is
 * installed.
 */
import assert from "node:assert/strict";

const INSTALL = new URL("../lib/harness/cli/install.ts", import.meta.url).pathname;

Deno.test("install.ts: a flag or an unknown name exits 2 naming it and installs nothing", async () => {
  const home = await Deno.makeTempDir();
  try {
    for (
      const [args, message] of [
        [["--force"], /^install: Unknown option '--force'/],
        [["codex", "codexx"], /^install: cli: unknown harness CLI "codexx" \(known: /],
      ] as Array<[string[], RegExp]>
    ) {
      const out = await new Deno.Command(Deno.execPath(), {
        args: ["run", "-A", INSTALL, ...args],
        env: { REINS_HOME: home },
        stdout: "piped",
        stderr: "piped",
      }).output();
      assert.equal(out.code, 2, args.join(" "));
      assert.match(new TextDecoder().decode(out.stderr), message);
      assert.equal(new TextDecoder().decode(out.stdout), "");
    }
    assert.deepEqual(await Array.fromAsync(Deno.readDir(home)), []);
  } finally {
    await Deno.remove(home, { recursive: true });
  }
});
