/**
 * Generates the datasets of the built-in environments under `data/envs/` from a fixed seed:
 * arithmetic tasks, a search corpus with one- and two-hop questions, instruction-following file
 * tasks, and coding tasks over small Python repositories with planted bugs and hidden tests.
 *
 * Usage: `deno run -A scripts/make_env_data.ts [--seed 7] [--out data/envs]`
 * (the same seed always writes the same bytes; tests check the shipped files against it).
 *
 * @module
 */
import { parseArgs } from "node:util";
import { evaluateExpression, formatNumber } from "../lib/harness/calculator.ts";
import type {
  ArithmeticTask,
  CodingTaskInput,
  FileCheck,
  FileTask,
  SearchDoc,
  SearchTask,
} from "../lib/harness/schema.ts";
// The same seed gives the same datasets everywhere.
import { mulberry32 } from "../lib/util/random.ts";

type Rng = () => number;
const int = (rng: Rng, lo: number, hi: number) => lo + Math.floor(rng() * (hi - lo + 1));
const pick = <T>(rng: Rng, items: readonly T[]): T => items[Math.floor(rng() * items.length)];
function shuffle<T>(rng: Rng, items: T[]): T[] {
  for (let i = items.length - 1; i > 0; i--) {
    const j = Math.floor(rng() * (i + 1));
    [items[i], items[j]] = [items[j], items[i]];
  }
  return items;
}

// ---------------------------------------------------------------------------------------------
// Arithmetic

function expression(rng: Rng, ops: number): string {
  // Built bottom-up so that every division is exact and every intermediate value small.
  let expr = String(int(rng, 2, 40));
  for (let i = 0; i < ops; i++) {
    const value = evaluateExpression(expr);
    const op = pick(rng, ["+", "-", "*", "/"] as const);
    const wrapped = /[+-]/.test(expr.replace(/^-/, "")) ? `(${expr})` : expr;
    if (op === "/") {
      const divisors = [2, 3, 4, 5, 6, 7, 8, 9].filter((d) => Number.isInteger(value / d));
      if (divisors.length === 0 || value === 0) {
        expr = `${wrapped} * ${int(rng, 2, 9)}`;
      } else {
        expr = `${wrapped} / ${pick(rng, divisors)}`;
      }
    } else if (op === "*") {
      expr = `${wrapped} * ${int(rng, 2, 12)}`;
    } else {
      const n = int(rng, 2, 60);
      expr = rng() < 0.5 ? `${expr} ${op} ${n}` : `${n} ${op} ${wrapped}`;
    }
  }
  return expr;
}

function arithmeticTasks(rng: Rng, n: number): ArithmeticTask[] {
  const out: ArithmeticTask[] = [];
  const seen = new Set<string>();
  while (out.length < n) {
    const steps = int(rng, 2, 4);
    const expr = expression(rng, steps);
    const value = evaluateExpression(expr);
    if (!Number.isInteger(value) || Math.abs(value) > 100_000 || seen.has(expr)) continue;
    seen.add(expr);
    out.push({
      id: `arith-${String(out.length).padStart(4, "0")}`,
      question: `What is ${expr}?`,
      expression: expr,
      answer: formatNumber(value),
      steps: (expr.match(/[+\-*/]/g) ?? []).length,
    });
  }
  return out;
}

// ---------------------------------------------------------------------------------------------
// Search

const SYLLABLES = [
  "ka",
  "lo",
  "ve",
  "ri",
  "mar",
  "nat",
  "dor",
  "sel",
  "qua",
  "bre",
  "tin",
  "gal",
  "os",
  "ur",
  "fen",
  "ith",
  "zan",
  "pel",
  "mo",
  "ra",
];

function name(rng: Rng, parts: number, used: Set<string>): string {
  for (;;) {
    let s = "";
    for (let i = 0; i < parts; i++) s += pick(rng, SYLLABLES);
    const word = s[0].toUpperCase() + s.slice(1);
    if (!used.has(word)) {
      used.add(word);
      return word;
    }
  }
}

function searchData(rng: Rng, countries: number): { corpus: SearchDoc[]; tasks: SearchTask[] } {
  const used = new Set<string>();
  const corpus: SearchDoc[] = [];
  const tasks: SearchTask[] = [];
  const trades = ["salt", "amber", "wool", "copper", "glass", "tea", "silk", "timber"];
  const roles = ["Queen", "King", "Duke", "Captain", "Abbess", "Merchant"];
  for (let c = 0; c < countries; c++) {
    const country = name(rng, 3, used);
    const capital = name(rng, 2, used);
    const river = name(rng, 2, used);
    const founder = `${name(rng, 2, used)} ${name(rng, 2, used)}`;
    const role = pick(rng, roles);
    const year = int(rng, 900, 1890);
    const trade = pick(rng, trades);
    const population = int(rng, 12, 950) * 1000;
    const cid = `doc-${corpus.length}`;
    corpus.push({
      id: cid,
      title: country,
      text: `${country} is a country known for its ${trade} trade. Its capital is ${capital}, ` +
        `and the ${river} river crosses it from north to south.`,
    });
    const tid = `doc-${corpus.length}`;
    corpus.push({
      id: tid,
      title: capital,
      text: `${capital} is the capital of ${country}. The city was founded in ${year} by ` +
        `${role} ${founder} and has about ${population} inhabitants.`,
    });
    const pid = `doc-${corpus.length}`;
    corpus.push({
      id: pid,
      title: founder,
      text: `${role} ${founder} founded the city of ${capital} in ${year}. Before that, ` +
        `${founder} traded ${trade} along the ${river} river.`,
    });
    const id = (k: number) => `search-${String(tasks.length + k).padStart(4, "0")}`;
    tasks.push({
      id: id(0),
      question: `What is the capital of ${country}?`,
      answer: capital,
      aliases: [],
      support: [cid],
      hops: 1,
    });
    tasks.push({
      id: id(0),
      question: `In which year was the capital of ${country} founded?`,
      answer: String(year),
      aliases: [],
      support: [cid, tid],
      hops: 2,
    });
    tasks.push({
      id: id(0),
      question: `Who founded the capital of ${country}?`,
      answer: founder,
      aliases: [`${role} ${founder}`],
      support: [cid, tid],
      hops: 2,
    });
  }
  return { corpus, tasks };
}

// ---------------------------------------------------------------------------------------------
// File tasks

const WORDS = [
  "apple",
  "river",
  "stone",
  "cloud",
  "maple",
  "ember",
  "delta",
  "orbit",
  "prism",
  "tulip",
  "violet",
  "walnut",
  "zephyr",
  "harbor",
  "lantern",
  "meadow",
];

function fileTasks(rng: Rng, perKind: number): FileTask[] {
  const tasks: FileTask[] = [];
  const add = (instruction: string, files: Record<string, string>, checks: FileCheck[]) =>
    tasks.push({
      id: `files-${String(tasks.length).padStart(4, "0")}`,
      instruction,
      files,
      checks,
    });
  for (let k = 0; k < perKind; k++) {
    const phrase = shuffle(rng, [...WORDS]).slice(0, 3).join(" ");
    add(
      `Create a file named greeting.txt whose only line is: ${phrase}`,
      { "README.md": "An empty project.\n" },
      [{ kind: "equals", path: "greeting.txt", content: `${phrase}\n` }, {
        kind: "unchanged",
        path: "README.md",
      }],
    );
    const lines = Array.from({ length: int(rng, 3, 12) }, () => pick(rng, WORDS));
    add(
      "Count the lines of data.txt and write the number (digits only) into count.txt.",
      { "data.txt": lines.join("\n") + "\n" },
      [{ kind: "equals", path: "count.txt", content: `${lines.length}\n` }, {
        kind: "unchanged",
        path: "data.txt",
      }],
    );
    const words = shuffle(rng, [...WORDS]).slice(0, int(rng, 4, 8));
    add(
      "Write the words of words.txt sorted alphabetically, one per line, into sorted.txt.",
      { "words.txt": words.join("\n") + "\n" },
      [{ kind: "equals", path: "sorted.txt", content: [...words].sort().join("\n") + "\n" }],
    );
    const port = int(rng, 1024, 9999);
    const oldPort = int(rng, 1024, 9999);
    const name = pick(rng, WORDS);
    add(
      `In config.ini, change the value of port to ${port}. Leave every other line unchanged.`,
      { "config.ini": `[server]\nname = ${name}\nport = ${oldPort}\ndebug = false\n` },
      [{
        kind: "equals",
        path: "config.ini",
        content: `[server]\nname = ${name}\nport = ${port}\ndebug = false\n`,
      }],
    );
    const logs = Array.from({ length: int(rng, 1, 3) }, (_, i) => `tmp/run${i}.log`);
    const keep = `tmp/${pick(rng, WORDS)}.txt`;
    add(
      "Delete every file in tmp/ whose name ends in .log. Keep all other files.",
      Object.fromEntries([...logs.map((p) => [p, "log line\n"]), [keep, "keep me\n"]]),
      [...logs.map((path) => ({ kind: "absent" as const, path })), {
        kind: "unchanged",
        path: keep,
      }],
    );
  }
  return tasks;
}

// ---------------------------------------------------------------------------------------------
// Coding repos

interface Repo {
  name: string;
  files: Record<string, string>;
  problem: string;
  hidden: Record<string, string>;
}

const REPOS: Repo[] = [
  {
    name: "textstats",
    files: {
      "README.md": "# textstats\n\nSmall text statistics helpers.\n",
      "textstats/__init__.py": "",
      "textstats/wordcount.py": `"""Word counting."""


def count_words(text):
    """Returns the number of words in text (words are separated by any whitespace)."""
    if not text:
        return 0
    return len(text.split(" "))


def most_common(text):
    """Returns the most common word (lower-cased); ties go to the earliest word."""
    counts = {}
    order = []
    for word in text.lower().split():
        if word not in counts:
            counts[word] = 0
            order.append(word)
        counts[word] += 1
    best = None
    for word in order:
        if best is None or counts[word] > counts[best]:
            best = word
    return best
`,
      "tests/__init__.py": "",
      "tests/test_wordcount.py": `import unittest

from textstats.wordcount import count_words, most_common


class WordCountTest(unittest.TestCase):
    def test_simple(self):
        self.assertEqual(count_words("a b c"), 3)

    def test_empty(self):
        self.assertEqual(count_words(""), 0)

    def test_most_common(self):
        self.assertEqual(most_common("b a b"), "b")


if __name__ == "__main__":
    unittest.main()
`,
    },
    problem: "count_words in textstats/wordcount.py gives wrong results when words are " +
      "separated by several spaces, tabs or newlines: count_words('a  b\\nc') should be 3. " +
      "Fix it.",
    hidden: {
      "test_hidden_wordcount.py": `import unittest

from textstats.wordcount import count_words


class HiddenWordCountTest(unittest.TestCase):
    def test_whitespace_runs(self):
        self.assertEqual(count_words("a  b\\nc\\t d "), 4)

    def test_only_spaces(self):
        self.assertEqual(count_words("   "), 0)


if __name__ == "__main__":
    unittest.main()
`,
    },
  },
  {
    name: "intervals",
    files: {
      "README.md": "# intervals\n\nMerging closed integer intervals.\n",
      "intervals/__init__.py": "",
      "intervals/merge.py": `"""Interval merging."""


def merge_intervals(intervals):
    """Merges overlapping or touching closed intervals [a, b]; returns them sorted."""
    result = []
    for start, end in intervals:
        if result and start < result[-1][1]:
            result[-1][1] = max(result[-1][1], end)
        else:
            result.append([start, end])
    return [tuple(pair) for pair in result]
`,
      "tests/__init__.py": "",
      "tests/test_merge.py": `import unittest

from intervals.merge import merge_intervals


class MergeTest(unittest.TestCase):
    def test_overlap(self):
        self.assertEqual(merge_intervals([(1, 3), (2, 5)]), [(1, 5)])

    def test_disjoint(self):
        self.assertEqual(merge_intervals([(1, 2), (4, 5)]), [(1, 2), (4, 5)])


if __name__ == "__main__":
    unittest.main()
`,
    },
    problem: "merge_intervals in intervals/merge.py must merge touching intervals ((1, 2) and " +
      "(2, 4) become (1, 4)) and must accept unsorted input. Both currently fail. Fix it.",
    hidden: {
      "test_hidden_merge.py": `import unittest

from intervals.merge import merge_intervals


class HiddenMergeTest(unittest.TestCase):
    def test_touching(self):
        self.assertEqual(merge_intervals([(1, 2), (2, 4)]), [(1, 4)])

    def test_unsorted(self):
        self.assertEqual(merge_intervals([(6, 8), (1, 3), (2, 4)]), [(1, 4), (6, 8)])


if __name__ == "__main__":
    unittest.main()
`,
    },
  },
  {
    name: "roman",
    files: {
      "README.md": "# roman\n\nRoman numerals.\n",
      "roman/__init__.py": "",
      "roman/convert.py": `"""Roman numeral conversion."""

_TABLE = [
    (1000, "M"),
    (500, "D"),
    (100, "C"),
    (90, "XC"),
    (50, "L"),
    (40, "XL"),
    (10, "X"),
    (9, "IX"),
    (5, "V"),
    (4, "IV"),
    (1, "I"),
]


def to_roman(number):
    """Converts 1 <= number <= 3999 to a Roman numeral."""
    if not 1 <= number <= 3999:
        raise ValueError("out of range")
    out = []
    for value, symbol in _TABLE:
        while number >= value:
            out.append(symbol)
            number -= value
    return "".join(out)
`,
      "tests/__init__.py": "",
      "tests/test_convert.py": `import unittest

from roman.convert import to_roman


class ConvertTest(unittest.TestCase):
    def test_small(self):
        self.assertEqual(to_roman(14), "XIV")

    def test_range(self):
        with self.assertRaises(ValueError):
            to_roman(0)


if __name__ == "__main__":
    unittest.main()
`,
    },
    problem: "to_roman in roman/convert.py writes 900 as DCCCC and 400 as CCCC instead of CM " +
      "and CD. Fix it.",
    hidden: {
      "test_hidden_convert.py": `import unittest

from roman.convert import to_roman


class HiddenConvertTest(unittest.TestCase):
    def test_subtractive_hundreds(self):
        self.assertEqual(to_roman(1994), "MCMXCIV")
        self.assertEqual(to_roman(444), "CDXLIV")


if __name__ == "__main__":
    unittest.main()
`,
    },
  },
];

// ---------------------------------------------------------------------------------------------

/** Everything the script writes: relative path → content. */
export function envDataFiles(seed: number): Record<string, string> {
  const rng = mulberry32(seed);
  const jsonl = (rows: unknown[]) => rows.map((row) => JSON.stringify(row)).join("\n") + "\n";
  const files: Record<string, string> = {};
  files["arithmetic/tasks.jsonl"] = jsonl(arithmeticTasks(rng, 200));
  const search = searchData(rng, 40);
  files["search/corpus.jsonl"] = jsonl(search.corpus);
  files["search/tasks.jsonl"] = jsonl(search.tasks);
  files["files/tasks.jsonl"] = jsonl(fileTasks(rng, 8));
  const coding: CodingTaskInput[] = REPOS.map((repo) => ({
    id: `coding-${repo.name}`,
    repo: repo.name,
    problem: repo.problem,
    test_dir: "tests",
    hidden_tests: repo.hidden,
  }));
  files["coding/tasks.jsonl"] = jsonl(coding);
  for (const repo of REPOS) {
    for (const [path, content] of Object.entries(repo.files)) {
      files[`coding/repos/${repo.name}/${path}`] = content;
    }
  }
  return files;
}

if (import.meta.main) {
  const { values } = parseArgs({
    args: Deno.args,
    options: { seed: { type: "string", default: "7" }, out: { type: "string" } },
    strict: true,
  });
  const seed = Number(values.seed);
  const out = values.out ?? new URL("../data/envs", import.meta.url).pathname;
  const files = envDataFiles(seed);
  for (const [path, content] of Object.entries(files)) {
    const full = `${out}/${path}`;
    await Deno.mkdir(full.slice(0, full.lastIndexOf("/")), { recursive: true });
    await Deno.writeTextFile(full, content);
  }
  console.log(`wrote ${Object.keys(files).length} files under ${out} (seed ${seed})`);
}
