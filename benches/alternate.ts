/**
 * A figures bench of two checkouts, run one after the other in alternation, so that a change is
 * measured side by side on the same machine: round 1 runs `before` then `after`, round 2 `after`
 * then `before`, and so on. On this project's noisy 2-core machines one run of `bench:gateway`
 * moves ±20% against the next; a figure is read as the median of its rounds, next to every
 * round's value and how many rounds `after` came out higher.
 *
 * The bench is any script that prints `name: value` lines (`benches/gateway.ts` by default); it
 * runs as its own process in each checkout (`deno run -A <bench>` with the checkout as working
 * directory), so each side uses its own code and its own `node_modules` (run `deno install` in a
 * fresh worktree first). `bench:proxy:ab` is the finer tool for the proxy: both stacks in one
 * process, request by request.
 *
 * Usage: `deno task bench:alternate --before ../before [--after .] [--bench benches/gateway.ts]
 * [--rounds 3] [-- <the bench's own flags>]`
 *
 * Prints `before_<figure>: <median>` and `after_<figure>: <median>` for every figure both sides
 * print.
 *
 * @module
 */
import { parseArgs } from "node:util";
import { resolve } from "node:path";
import { median } from "../lib/util/stats.ts";

const { values: args, positionals } = parseArgs({
  args: Deno.args,
  options: {
    before: { type: "string" },
    after: { type: "string", default: "." },
    bench: { type: "string", default: "benches/gateway.ts" },
    rounds: { type: "string", default: "3" },
  },
  allowPositionals: true,
  strict: true,
});

function fail(message: string): never {
  console.error(message);
  Deno.exit(2);
}

if (!args.before) fail("--before: the checkout to compare with is required (e.g. a git worktree)");
const rounds = Number(args.rounds);
if (!Number.isInteger(rounds) || rounds < 1) {
  fail(`--rounds: expected a positive integer, got '${args.rounds}'`);
}
const sides = { before: resolve(args.before), after: resolve(args.after) };
for (const [side, root] of Object.entries(sides)) {
  try {
    Deno.statSync(`${root}/${args.bench}`);
  } catch {
    fail(`--${side}: '${root}' has no ${args.bench}`);
  }
}

/** The `name: value` lines of one output, in order. */
function figuresOf(output: string): Map<string, number> {
  const figures = new Map<string, number>();
  for (const line of output.split("\n")) {
    const match = /^([a-z][a-z0-9_]*): (-?[0-9][0-9.e+-]*)$/.exec(line.trim());
    if (match && Number.isFinite(Number(match[2]))) figures.set(match[1], Number(match[2]));
  }
  return figures;
}

async function runBench(root: string): Promise<Map<string, number>> {
  const out = await new Deno.Command(Deno.execPath(), {
    args: ["run", "-A", args.bench, ...positionals],
    cwd: root,
    stdout: "piped",
    stderr: "piped",
  }).output();
  const text = new TextDecoder().decode(out.stdout);
  if (!out.success) {
    const tail = (text + new TextDecoder().decode(out.stderr)).split("\n").slice(-20).join("\n");
    console.error(`${args.bench} failed in ${root} (exit ${out.code}):\n${tail}`);
    Deno.exit(1);
  }
  return figuresOf(text);
}

console.log(
  `alternate: ${args.bench}, before ${sides.before}, after ${sides.after}; ${rounds} round(s); ` +
    `load average ${Deno.loadavg().map((l) => l.toFixed(2)).join(" ")}`,
);
const runs = { before: [] as Map<string, number>[], after: [] as Map<string, number>[] };
for (let round = 0; round < rounds; round++) {
  const order = round % 2 ? ["after", "before"] as const : ["before", "after"] as const;
  for (const side of order) {
    const started = performance.now();
    runs[side].push(await runBench(sides[side]));
    console.log(
      `round ${round + 1}: ${side} ran in ${((performance.now() - started) / 1000).toFixed(0)} s`,
    );
  }
}

const names = [...runs.before[0].keys()].filter((name) => runs.after.every((r) => r.has(name)));
const shown = (v: number) => Number(v.toPrecision(6)).toString();
for (const name of names) {
  const before = runs.before.map((r) => r.get(name)!);
  const after = runs.after.map((r) => r.get(name)!);
  const higher = after.filter((v, i) => v > before[i]).length;
  console.log(
    `${name}: before ${before.map(shown).join(", ")} | after ${after.map(shown).join(", ")} | ` +
      `after higher in ${higher} of ${rounds}`,
  );
}
for (const name of names) {
  console.log(`before_${name}: ${shown(median(runs.before.map((r) => r.get(name)!)))}`);
  console.log(`after_${name}: ${shown(median(runs.after.map((r) => r.get(name)!)))}`);
}
