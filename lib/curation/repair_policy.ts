/**
 * A scripted "policy" for the difficulty probe on a CPU machine: a blind mutation-based
 * program-repair heuristic that drives the built-in harness's `bash` tool the way a weak
 * agent would. It runs the tests, reads the file of the function the failing test calls (or
 * the deepest library frame of a traceback), and tries up to `tries` single-line edits drawn
 * at random from the inverses of the generator's mutation operators (operator swaps, ±1 on
 * integer literals, negated conditions, flipped booleans), running the tests after each.
 *
 * It never sees the task's patch or tests beyond what the agent sees: whether it solves a
 * task depends on the bug (a removed statement or a bug in a helper is out of its reach; a
 * swapped operator in a short function is found often), so its pass rate over k rollouts is
 * a real, if crude, difficulty measurement. Every rollout is a real harness run through the
 * proxy, the controller's sandbox and the verifier; only the model is replaced.
 *
 * @module
 */
import { createHash } from "node:crypto";
import { promptRole } from "../harness/builtin/scripted.ts";
import { mulberry32 } from "../util/random.ts";
import type { ScriptedPolicyInput, ScriptedTurn } from "../proxy/scripted_upstream.ts";

/** Options of {@link repairPolicy}. */
export interface RepairPolicyOptions {
  seed?: number;
  /** Edits tried per rollout. */
  tries?: number;
}

/** One single-line edit the policy may try. */
export interface LineEdit {
  /** 1-based line number. */
  line: number;
  before: string;
  after: string;
}

// A mutated loop may never end: the policy's own test runs stop after 20 seconds.
const TEST_CMD = "timeout 20 python3 -m unittest discover -s tests -t .";
const NOT_CALLS = new Set([
  "self",
  "len",
  "sorted",
  "list",
  "dict",
  "set",
  "tuple",
  "int",
  "str",
  "float",
  "range",
  "print",
  "abs",
  "min",
  "max",
  "sum",
]);

const SWAPS: [RegExp, string][] = [
  [/<=/g, "<"],
  [/>=/g, ">"],
  [/(?<![<>=!])<(?![<=])/g, "<="],
  [/(?<![<>=!-])>(?![>=])/g, ">="],
  [/==/g, "!="],
  [/!=/g, "=="],
  [/\+=/g, "-="],
  [/-=/g, "+="],
  [/ \+ /g, " - "],
  [/ - /g, " + "],
  [/ \* /g, " // "],
  [/ \* /g, " / "],
  [/ \/\/ /g, " * "],
  [/ \/\/ /g, " % "],
  [/ \/ /g, " * "],
  [/ % /g, " // "],
  [/ and /g, " or "],
  [/ or /g, " and "],
  [/ not in /g, " in "],
  [/(?<!not) in (?!range)/g, " not in "],
  [/\bTrue\b/g, "False"],
  [/\bFalse\b/g, "True"],
];

/**
 * Candidate single-line edits of the given lines: each operator occurrence swapped, each
 * integer literal moved by one, each `if`/`while`/`elif` condition negated (or un-negated).
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * import { lineEdits } from "./repair_policy.ts";
 * const edits = lineEdits([[3, "    return year % 4 != 0"]]);
 * assert.ok(edits.some((e) => e.after === "    return year % 4 == 0"));
 * assert.ok(edits.some((e) => e.after === "    return year % 5 != 0"));
 * ```
 */
export function lineEdits(lines: [number, string][]): LineEdit[] {
  const out: LineEdit[] = [];
  const seen = new Set<string>();
  const push = (line: number, before: string, after: string) => {
    const key = `${line}\0${after}`;
    if (after === before || seen.has(key)) return;
    seen.add(key);
    out.push({ line, before, after });
  };
  for (const [line, text] of lines) {
    const code = text.replace(/#.*$/, "");
    if (/^\s*("""|''')/.test(code) || code.trim() === "" || /^\s*def /.test(code)) continue;
    for (const [pattern, replacement] of SWAPS) {
      for (const m of code.matchAll(pattern)) {
        const at = m.index!;
        push(line, text, text.slice(0, at) + replacement + text.slice(at + m[0].length));
      }
    }
    for (const m of code.matchAll(/(?<![\w.])\d+(?![\w.])/g)) {
      const value = Number(m[0]);
      for (const next of [value + 1, value - 1]) {
        if (next < 0) continue;
        const at = m.index!;
        push(line, text, text.slice(0, at) + String(next) + text.slice(at + m[0].length));
      }
    }
    // A negated sub-expression (`x if not (c) else y`): drop the negation.
    for (const m of code.matchAll(/\bnot \(([^()]*(?:\([^()]*\)[^()]*)*)\)/g)) {
      const at = m.index!;
      push(line, text, text.slice(0, at) + m[1] + text.slice(at + m[0].length));
    }
    const cond = code.match(/^(\s*(?:if|elif|while) )(not \((.*)\)|not (.*)|(.*)):\s*$/);
    if (cond) {
      const inner = cond[3] ?? cond[4];
      if (inner !== undefined) {
        push(line, text, `${cond[1]}${inner}:`);
      } else {
        push(line, text, `${cond[1]}not ${cond[5]}:`);
        push(line, text, `${cond[1]}not (${cond[5]}):`);
      }
    }
  }
  return out;
}

/**
 * The lines of function `fn` (its whole body; `<module>`: every line) in a `cat -n` listing.
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * import { functionLines } from "./repair_policy.ts";
 * const listing: [number, string][] = [[1, "def f(x):"], [2, "    return x"], [3, "def g():"]];
 * assert.deepEqual(functionLines(listing, "f"), [[2, "    return x"]]);
 * ```
 */
export function functionLines(listing: [number, string][], fn: string): [number, string][] {
  if (fn === "<module>") return listing;
  const start = listing.findIndex(([, text]) => new RegExp(`^\\s*def ${fn}\\(`).test(text));
  if (start < 0) return [];
  const indent = listing[start][1].match(/^\s*/)![0].length;
  const out: [number, string][] = [];
  for (let i = start + 1; i < listing.length; i++) {
    const [n, text] = listing[i];
    if (text.trim() !== "" && text.match(/^\s*/)![0].length <= indent) break;
    out.push([n, text]);
  }
  return out;
}

function section(prompt: string, marker: string): string | null {
  const at = prompt.lastIndexOf(marker);
  if (at < 0) return null;
  const rest = prompt.slice(at + marker.length);
  const end = rest.search(/@@(R\d|T\d+)@@/);
  return end < 0 ? rest : rest.slice(0, end);
}

/**
 * Where to look, from the first test run's output: the deepest library frame of a traceback,
 * else the functions the failing assertion calls, else names taken from the failing test's
 * own name (`test_remove_all` → `remove_all`, `remove`).
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * import { repairTargets } from "./repair_policy.ts";
 * const output = "FAIL: test_first_day (t.T.test_first_day)\n    self.assertEqual(day_of_year(2024, 1, 1), 1)";
 * assert.deepEqual(repairTargets(output), { file: null, fns: ["day_of_year", "first_day", "first"] });
 * ```
 */
export function repairTargets(testOutput: string): { file: string | null; fns: string[] } | null {
  const frames = [...testOutput.matchAll(/File "([^"]+\.py)", line (\d+), in (\S+)/g)];
  const library = frames.filter(([, path]) => !/\/tests\//.test(path) && !/\/usr\/lib/.test(path));
  if (library.length > 0) {
    const [, file, , fn] = library[library.length - 1];
    return { file, fns: [fn] };
  }
  const fns: string[] = [];
  const add = (name: string) => {
    if (!NOT_CALLS.has(name) && !name.startsWith("assert") && !fns.includes(name)) fns.push(name);
  };
  for (const m of testOutput.matchAll(/^\s+(self\.assert\w*\(.*)$/gm)) {
    for (const call of m[1].matchAll(/(?<![A-Za-z0-9_])([a-z_][a-z0-9_]*)\(/g)) add(call[1]);
  }
  for (const m of testOutput.matchAll(/^(?:FAIL|ERROR): (test_\w+)/gm)) {
    const words = m[1].slice(5).split("_");
    for (let n = words.length; n > 0; n--) add(words.slice(0, n).join("_"));
  }
  return fns.length > 0 ? { file: null, fns } : null;
}

function bash(command: string, reasoning: string): ScriptedTurn {
  return { reasoning, tool_calls: [{ name: "bash", arguments: { command } }] };
}

function b64(text: string): string {
  return btoa(String.fromCharCode(...new TextEncoder().encode(text)));
}

/**
 * The policy function for `startScriptedUpstream({ policy })`.
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * import { repairPolicy } from "./repair_policy.ts";
 * const policy = repairPolicy({ seed: 0, tries: 2 });
 * const first = policy({ promptIds: [], promptText: "user\nFix the bug.", call: 0 });
 * assert.match(JSON.stringify(first.tool_calls), /unittest discover/);
 * ```
 */
export function repairPolicy(
  options: RepairPolicyOptions = {},
): (input: ScriptedPolicyInput) => ScriptedTurn {
  const seed = options.seed ?? 0;
  const tries = options.tries ?? 5;
  const visits = new Map<string, number>();
  const done = (text: string): ScriptedTurn => ({ content: `<answer>${text}</answer>` });
  return ({ promptText }) => {
    if (promptRole(promptText) !== "main") return { content: "Progress so far: tests run." };
    const tests = section(promptText, "@@R1@@");
    if (tests === null) {
      return bash(`echo "@@R$((1))@@"; ${TEST_CMD} 2>&1 | tail -n 80`, "Run the tests first.");
    }
    const listing = section(promptText, "@@R2@@");
    if (listing === null) {
      const where = repairTargets(tests);
      if (!where) return done("the tests pass");
      // The first name that a library module (not a test) defines.
      const find = where.file
        ? `f=${JSON.stringify(where.file)}; fn=${where.fns[0]}`
        : `for fn in ${where.fns.join(" ")}; do f=$(grep -rlE "def $fn\\(" --include=*.py . | ` +
          `grep -v "^./tests/" | head -n 1); [ -n "$f" ] && break; done`;
      return bash(
        `echo "@@R$((2))@@"; ${find}; echo "@@FN $fn"; echo "@@FILE $f"; cat -n "$f"`,
        `Read ${where.fns[0]}.`,
      );
    }
    const fn = listing.match(/@@FN (\S+)/)?.[1] ?? "<module>";
    const file = [...listing.matchAll(/@@FILE (\S+\.py)/g)].at(-1)?.[1];
    if (!file) return done("could not find the code");
    const rows: [number, string][] = [];
    for (const m of listing.matchAll(/^\s*(\d+)\t(.*)$/gm)) rows.push([Number(m[1]), m[2]]);
    const edits = lineEdits(functionLines(rows, fn));
    const tried = [...promptText.matchAll(/@@T(\d+)@@ (\d+)/g)].map((m) => Number(m[2]));
    const results = [...promptText.matchAll(/@@(PASS|FAIL)@@/g)];
    if (results.at(-1)?.[1] === "PASS") return done("fixed; the tests pass");
    if (tried.length >= tries || edits.length === 0) return done("no fix found");
    const untried = edits.map((_, i) => i).filter((i) => !tried.includes(i));
    if (untried.length === 0) return done("no fix found");
    // Rollouts of one task reach the same state with the same prompt (up to paths): count
    // visits per state so that k rollouts draw k different, seeded choices.
    const key = createHash("sha256").update(`${file.replace(/^.*\//, "")}\0${fn}\0`)
      .update(JSON.stringify(rows)).update(`\0${tried.join(",")}`).digest("hex");
    const visit = visits.get(key) ?? 0;
    visits.set(key, visit + 1);
    const rng = mulberry32(
      createHash("sha256").update(`${seed}\0${key}\0${visit}`).digest().readUInt32LE(0),
    );
    const pick = untried[Math.floor(rng() * untried.length)];
    const edit = edits[pick];
    const script = [
      "import json, os, shutil",
      `p = ${JSON.stringify(file)}`,
      "b = p + '.reins-orig'",
      "os.path.exists(b) or shutil.copy(p, b)",
      "lines = open(b).read().split('\\n')",
      `lines[${edit.line - 1}] = json.loads(${JSON.stringify(JSON.stringify(edit.after))})`,
      "open(p, 'w').write('\\n'.join(lines))",
    ].join("\n");
    const orig = JSON.stringify(`${file}.reins-orig`);
    return bash(
      `echo "@@T$((${tried.length + 1}))@@ ${pick}"; echo ${
        b64(script)
      } | base64 -d | python3 && ` +
        `(${TEST_CMD} >/dev/null 2>&1 && { rm -f ${orig}; echo "@@PA""SS@@"; } || ` +
        `echo "@@FA""IL@@")`,
      `Try line ${edit.line}: ${edit.after.trim()}`,
    );
  };
}
