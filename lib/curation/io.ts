/**
 * Task sets on disk: SWE-smith records read from JSONL (one record a line; errors name the
 * line and field) or parquet (nodejs-polars; errors name the row and field), curated sets
 * written as both, and the coding environment's own tasks mapped onto the SWE-smith record.
 *
 * @module
 */
import pl from "nodejs-polars";
import { createHash } from "node:crypto";
import { SWE_TASKS_FILE } from "../harness/envs/coding.ts";
import { readTree } from "../harness/envs/coding_tasks.ts";
import {
  type CuratedTask,
  CuratedTaskSchema,
  parseOrThrow,
  type SweTask,
  SweTaskSchema,
  ValidationError,
} from "../schema.ts";
import { type CodingTask, CodingTaskSchema } from "../harness/schema.ts";
import type { z } from "zod";

/** Columns stored as JSON text in parquet (their keys vary from row to row). */
const JSON_COLUMNS = new Set(["hidden_tests"]);
const LIST_COLUMNS = new Set(["FAIL_TO_PASS", "PASS_TO_PASS"]);

function parseRows<S extends z.ZodType>(
  rows: unknown[],
  schema: S,
  where: (i: number) => string,
): z.infer<S>[] {
  return rows.map((row, i) => {
    const value = { ...(row as Record<string, unknown>) };
    for (const column of JSON_COLUMNS) {
      if (typeof value[column] === "string") value[column] = JSON.parse(value[column] as string);
    }
    return parseOrThrow(schema, value, where(i));
  });
}

function readJsonlRows(path: string, text: string): unknown[] {
  const rows: unknown[] = [];
  for (const [i, line] of text.split("\n").entries()) {
    if (line.trim() === "") continue;
    try {
      rows.push(JSON.parse(line));
    } catch (error) {
      throw new ValidationError(`${path}:${i + 1}`, [
        `${path}:${i + 1}: not JSON (${(error as Error).message})`,
      ]);
    }
  }
  return rows;
}

function readAny<S extends z.ZodType>(path: string, schema: S): z.infer<S>[] {
  if (path.endsWith(".parquet")) {
    let df: pl.DataFrame;
    try {
      df = pl.readParquet(path);
    } catch (error) {
      throw new Error(`cannot read task set ${path}: ${(error as Error).message}`);
    }
    return parseRows(df.toRecords(), schema, (i) => `${path}[row ${i}]`);
  }
  if (!path.endsWith(".jsonl")) {
    throw new Error(`task set ${path}: expected a .jsonl or .parquet file`);
  }
  let text: string;
  try {
    text = Deno.readTextFileSync(path);
  } catch (error) {
    throw new Error(`cannot read task set ${path}: ${(error as Error).message}`);
  }
  // Line numbers count every line, blank ones too, so that errors point at the right one.
  const lineOf: number[] = [];
  text.split("\n").forEach((line, i) => line.trim() !== "" && lineOf.push(i + 1));
  return parseRows(readJsonlRows(path, text), schema, (i) => `${path}:${lineOf[i]}`);
}

/**
 * Reads a SWE-smith task set (`.jsonl` or `.parquet`); every record is validated.
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * import { DEFAULT_DATA_DIR } from "../harness/envs/common.ts";
 * import { readTaskSet } from "./io.ts";
 * const tasks = readTaskSet(`${DEFAULT_DATA_DIR}/coding/swesmith.jsonl`);
 * assert.ok(tasks.length >= 100);
 * assert.ok(tasks.every((t) => t.FAIL_TO_PASS.length > 0));
 * ```
 */
export function readTaskSet(path: string): SweTask[] {
  return readAny(path, SweTaskSchema);
}

/** Reads a curated set written by {@link writeTaskSet} (`.jsonl` or `.parquet`). */
export function readCuratedSet(path: string): CuratedTask[] {
  return readAny(path, CuratedTaskSchema);
}

/** The columns of a set in a fixed order (the schema's keys). */
function columns(rows: Record<string, unknown>[], keys: string[]): pl.DataFrame {
  const series = keys.map((key) => {
    const values = rows.map((r) => r[key] ?? null);
    if (LIST_COLUMNS.has(key)) {
      // polars infers a list column from its first non-null value: none (an empty set, or all
      // null) needs the type from a cast.
      return values.some((v) => v !== null)
        ? pl.Series(key, values as string[][], pl.List(pl.Utf8))
        : pl.Series(key, values as null[], pl.Utf8).cast(pl.List(pl.Utf8));
    }
    if (JSON_COLUMNS.has(key)) return pl.Series(key, values.map((v) => JSON.stringify(v)), pl.Utf8);
    if (values.every((v) => v === null || typeof v === "number")) {
      const float = values.some((v) => typeof v === "number" && !Number.isInteger(v)) ||
        key.endsWith("_rate");
      return pl.Series(key, values as (number | null)[], float ? pl.Float64 : pl.Int64);
    }
    return pl.Series(key, values as (string | null)[], pl.Utf8);
  });
  return pl.DataFrame(series);
}

/**
 * Writes a task set as `<base>.jsonl` and `<base>.parquet` and returns their SHA-256s.
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * import { DEFAULT_DATA_DIR } from "../harness/envs/common.ts";
 * import { readTaskSet, writeTaskSet } from "./io.ts";
 * const tasks = readTaskSet(`${DEFAULT_DATA_DIR}/coding/swesmith.jsonl`).slice(0, 3);
 * const dir = await Deno.makeTempDir();
 * await writeTaskSet(`${dir}/set`, tasks);
 * assert.deepEqual(readTaskSet(`${dir}/set.parquet`), tasks);
 * await Deno.remove(dir, { recursive: true });
 * ```
 */
export async function writeTaskSet(
  base: string,
  rows: (SweTask | CuratedTask)[],
): Promise<{ jsonl: string; parquet: string; jsonl_sha256: string }> {
  const jsonlText = rows.map((r) => JSON.stringify(r) + "\n").join("");
  await Deno.writeTextFile(`${base}.jsonl`, jsonlText);
  const keys = Object.keys(
    rows[0] ?? SweTaskSchema.parse({
      instance_id: "x",
      repo: "x",
      patch: "",
      problem_statement: "",
      FAIL_TO_PASS: [],
      PASS_TO_PASS: [],
    }),
  );
  columns(rows as unknown as Record<string, unknown>[], keys).writeParquet(`${base}.parquet`);
  return {
    jsonl: `${base}.jsonl`,
    parquet: `${base}.parquet`,
    jsonl_sha256: createHash("sha256").update(jsonlText).digest("hex"),
  };
}

function testIds(testDir: string, file: string, content: string): string[] {
  const module = `${testDir}.${file.replace(/\.py$/, "")}`.replaceAll("/", ".");
  const ids: string[] = [];
  let cls: string | null = null;
  for (const line of content.split("\n")) {
    const c = line.match(/^class (\w+)\(.*TestCase.*\):/);
    if (c) cls = c[1];
    else if (/^\S/.test(line)) cls = null;
    const t = line.match(/^ {4}def (test\w*)\(/);
    if (t && cls) ids.push(`${module}.${cls}.${t[1]}`);
  }
  return ids;
}

/**
 * The coding environment's hand-written task as a SWE-smith record: its repository already
 * holds the bug (`patch` ""), the hidden tests are FAIL_TO_PASS and the visible ones
 * PASS_TO_PASS (read from the test files' `TestCase` classes), and no gold patch is known.
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * import { codingEnv } from "../harness/envs/coding.ts";
 * import { codingTaskToSwe } from "./io.ts";
 * const env = codingEnv();
 * const record = codingTaskToSwe(env.task("coding-roman"), `${env.dataDir}/coding/repos`);
 * assert.deepEqual(record.FAIL_TO_PASS, [
 *   "tests.test_hidden_convert.HiddenConvertTest.test_subtractive_hundreds",
 * ]);
 * assert.equal(record.PASS_TO_PASS.length, 2);
 * ```
 */
export function codingTaskToSwe(task: CodingTask, reposDir: string): SweTask {
  const parsed = parseOrThrow(CodingTaskSchema, task, "task");
  const hidden = Object.entries(parsed.hidden_tests).flatMap(([file, content]) =>
    testIds(parsed.test_dir, file, content)
  );
  let visible: string[] = [];
  try {
    const tree = readTree(`${reposDir}/${parsed.repo}`);
    visible = Object.entries(tree)
      .filter(([p]) => p.startsWith(`${parsed.test_dir}/test`) && p.endsWith(".py"))
      .flatMap(([p, content]) =>
        testIds(parsed.test_dir, p.slice(parsed.test_dir.length + 1), content)
      );
  } catch { /* a missing repository is the environment stage's finding */ }
  return SweTaskSchema.parse({
    instance_id: parsed.id,
    repo: parsed.repo,
    patch: parsed.patch,
    problem_statement: parsed.problem,
    FAIL_TO_PASS: [...hidden, ...parsed.fail_to_pass.filter((id) => !hidden.includes(id))],
    PASS_TO_PASS: visible,
    image_name: `reins.coding.${parsed.repo}`,
    test_dir: parsed.test_dir,
    hidden_tests: parsed.hidden_tests,
    source: "handwritten",
  });
}

/**
 * Every task of a coding dataset directory (`<dataDir>/coding`) as SWE-smith records: the
 * hand-written `tasks.jsonl` mapped by {@link codingTaskToSwe}, then `swesmith.jsonl`.
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * import { DEFAULT_DATA_DIR } from "../harness/envs/common.ts";
 * import { codingDatasetTasks } from "./io.ts";
 * const tasks = codingDatasetTasks(DEFAULT_DATA_DIR);
 * assert.deepEqual(tasks.slice(0, 3).map((t) => t.source), ["handwritten", "handwritten", "handwritten"]);
 * ```
 */
export function codingDatasetTasks(dataDir: string): SweTask[] {
  const reposDir = `${dataDir}/coding/repos`;
  const own = readJsonlRows(
    `${dataDir}/coding/tasks.jsonl`,
    Deno.readTextFileSync(`${dataDir}/coding/tasks.jsonl`),
  ).map((row, i) =>
    codingTaskToSwe(parseOrThrow(CodingTaskSchema, row, `tasks.jsonl:${i + 1}`), reposDir)
  );
  let generated: SweTask[] = [];
  try {
    generated = readTaskSet(`${dataDir}/coding/${SWE_TASKS_FILE}`);
  } catch (error) {
    if (!(error instanceof Error && /cannot read/.test(error.message))) throw error;
  }
  return [...own, ...generated];
}
