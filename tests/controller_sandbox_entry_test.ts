/**
 * The sandbox's first process reads its flags with `node:util` `parseArgs`: every bad flag is
 * refused with a message naming it (exit 2, before the harness starts), and everything after
 * `--` is the harness's own argv.
 */
import assert from "node:assert/strict";
import { parseEntryArgs } from "../lib/controller/sandbox_entry.ts";

const ENTRY = new URL("../lib/controller/sandbox_entry.ts", import.meta.url).pathname;

async function runEntry(args: string[]): Promise<{ code: number; stdout: string; stderr: string }> {
  const out = await new Deno.Command(Deno.execPath(), {
    args: ["run", "-A", ENTRY, ...args],
    stdout: "piped",
    stderr: "piped",
  }).output();
  const dec = new TextDecoder();
  return { code: out.code, stdout: dec.decode(out.stdout), stderr: dec.decode(out.stderr) };
}

Deno.test("sandbox entry: --forward pairs, then the harness argv after -- untouched", () => {
  assert.deepEqual(
    parseEntryArgs([
      "--forward",
      "8420=/tmp/rs-1/f0.sock",
      "--forward=443=/tmp/rs-1/f=1.sock",
      "--",
      "bash",
      "-c",
      "--forward 1=/x",
      "--",
    ]),
    {
      forwards: [
        { port: 8420, socket: "/tmp/rs-1/f0.sock" },
        { port: 443, socket: "/tmp/rs-1/f=1.sock" },
      ],
      argv: ["bash", "-c", "--forward 1=/x", "--"],
    },
  );
  assert.deepEqual(parseEntryArgs(["--", "true"]), { forwards: [], argv: ["true"] });
});

Deno.test("sandbox entry: each bad flag is refused with a message naming it", () => {
  const cases: Array<[string[], RegExp]> = [
    [["--bogus", "--", "true"], /Unknown option '--bogus'/],
    [["--forward", "--", "true"], /Option '--forward <value>' argument missing/],
    [["--forward", "http=/s", "--", "true"], /--forward: expected PORT=SOCKET .* got 'http=\/s'/],
    [["--forward", "0=/s", "--", "true"], /--forward: .*got '0=\/s'/],
    [["--forward", "65536=/s", "--", "true"], /--forward: .*got '65536=\/s'/],
    [["--forward", "1.5=/s", "--", "true"], /--forward: .*got '1.5=\/s'/],
    [["--forward", "80=", "--", "true"], /--forward: .*got '80='/],
    [["--forward", "80=/a", "--forward", "80=/b", "--", "true"], /--forward: port 80 given twice/],
    [["stray", "--", "true"], /Unexpected argument 'stray'/],
    [["--forward", "80=/a"], /missing harness command after --/],
    [["--forward", "80=/a", "--"], /missing harness command after --/],
  ];
  for (const [args, message] of cases) {
    assert.throws(() => parseEntryArgs(args), message, JSON.stringify(args));
  }
});

Deno.test("sandbox entry: a bad flag exits 2 naming it and runs nothing; a good line passes the harness's status through", async () => {
  const dir = await Deno.makeTempDir();
  try {
    const marker = `${dir}/ran`;
    const bad = await runEntry(["--forward", "99999=/s", "--", "touch", marker]);
    assert.equal(bad.code, 2);
    assert.match(bad.stderr, /^sandbox_entry: --forward: .*got '99999=\/s'/);
    const unknown = await runEntry(["--fowrard", "80=/s", "--", "touch", marker]);
    assert.equal(unknown.code, 2);
    assert.match(unknown.stderr, /Unknown option '--fowrard'/);
    await assert.rejects(Deno.stat(marker), Deno.errors.NotFound);

    const good = await runEntry(["--", "sh", "-c", `touch ${marker}; echo out; exit 3`]);
    assert.equal(good.code, 3);
    assert.equal(good.stdout, "out\n");
    assert.ok((await Deno.stat(marker)).isFile);
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
});
