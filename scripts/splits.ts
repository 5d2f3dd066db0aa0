/**
 * `deno task splits`: how many training samples do these transcripts become?
 *
 * Usage: `deno task splits [--template qwen3|qwen3_keep_reasoning|DIR]
 * [--policy-output logged|thinking|plain] [--strategy prefix_merge|per_call|buffer_substitute|tree]
 * [--enable-thinking true|false] PATH...`, or `deno task splits --table [--strategy S] PATH...`
 * for the Figure 10 table (every setting of `SPLITS_GRID` on each PATH and on all of them).
 *
 * Reads every supported transcript (SWE-agent `.traj`, tau-bench results, mini-swe-agent
 * `.traj.json`, Claude Code `.jsonl`; format detected) in each file or folder, replays each run
 * through the chat template as a reins proxy would have recorded it under the stated policy
 * output, assembles the calls and prints `name: value` lines: the settings, `rollouts`,
 * `samples_per_rollout`, `single_share` and one `break_<reason>` line per reason. Bad flags exit
 * with status 2 and a message naming the flag; unreadable input with status 1.
 *
 * @module
 */
import { basename, resolve } from "node:path";
import { parseArgs } from "node:util";
import { MergeStrategySchema } from "../lib/schema.ts";
import { PolicyOutputSchema } from "../lib/trajectories/schema.ts";
import {
  formatSplitsReport,
  formatSplitsTable,
  loadChatTemplate,
  loadTranscripts,
  measureSplits,
  measureSplitsGrid,
  type TranscriptSet,
} from "../lib/trajectories/splits.ts";

const USAGE = `usage: deno task splits [--template qwen3|qwen3_keep_reasoning|DIR]
  [--policy-output logged|thinking|plain]
  [--strategy prefix_merge|per_call|buffer_substitute|tree]
  [--enable-thinking true|false] PATH...
       deno task splits --table [--strategy ...] PATH...

  --template         chat template + tokenizer: qwen3 (official; drops reasoning from history),
                     qwen3_keep_reasoning (writes every turn back with its think block), or a
                     folder with tokenizer.json + tokenizer_config.json (default qwen3)
  --policy-output    what the policy emits before its answer: logged (what the transcript
                     says), thinking (always a think block, empty where none was logged),
                     plain (never) (default logged)
  --strategy         how calls become samples (default prefix_merge)
  --enable-thinking  pass enable_thinking to the template (default: not passed)
  --table            the Figure 10 table instead: both named templates × every policy output,
                     and qwen3 with enable_thinking=false, on each PATH (a column) and on all
  PATH               transcript files or folders (format detected)`;

class UsageError extends Error {}

function choice<T extends string>(flag: string, value: string, options: readonly T[]): T {
  if ((options as readonly string[]).includes(value)) return value as T;
  throw new UsageError(`${flag}: expected ${options.join("|")}, got "${value}"`);
}

function parse(args: string[]) {
  let parsed;
  try {
    parsed = parseArgs({
      args,
      allowPositionals: true,
      strict: true,
      options: {
        template: { type: "string" },
        "policy-output": { type: "string" },
        strategy: { type: "string", default: "prefix_merge" },
        "enable-thinking": { type: "string" },
        table: { type: "boolean", default: false },
        help: { type: "boolean", short: "h", default: false },
      },
    });
  } catch (error) {
    // node:util names the flag in its message ("Unknown option '--x'", "Option '--y <value>'
    // argument missing"); say it the way the other errors do.
    const message = (error as Error).message.split(". ")[0];
    const flag = /'(-[^' ]+)/.exec(message)?.[1] ?? "arguments";
    throw new UsageError(`${flag}: ${message}`);
  }
  const { values, positionals } = parsed;
  if (values.help) return null;
  if (positionals.length === 0) throw new UsageError("PATH: give at least one file or folder");
  if (values.table) {
    for (const flag of ["template", "policy-output", "enable-thinking"] as const) {
      if (values[flag] !== undefined) {
        throw new UsageError(`--${flag}: --table measures every setting; drop --${flag}`);
      }
    }
  }
  const thinking = values["enable-thinking"];
  return {
    table: values.table,
    template: values.template ?? "qwen3",
    policy_output: choice(
      "--policy-output",
      values["policy-output"] ?? "logged",
      PolicyOutputSchema.options,
    ),
    strategy: choice("--strategy", values.strategy, MergeStrategySchema.options),
    enable_thinking: thinking === undefined
      ? undefined
      : choice("--enable-thinking", thinking, ["true", "false"]) === "true",
    paths: positionals,
  };
}

async function main(args: string[]): Promise<number> {
  let options;
  try {
    options = parse(args);
  } catch (error) {
    if (!(error instanceof UsageError)) throw error;
    console.error(`splits: ${error.message}\n${USAGE}`);
    return 2;
  }
  if (options === null) {
    console.log(USAGE);
    return 0;
  }
  if (options.table) {
    try {
      const sets: TranscriptSet[] = [];
      for (const path of options.paths) {
        sets.push({ name: basename(resolve(path)), ...await loadTranscripts([path]) });
      }
      const cells = await measureSplitsGrid(sets, { strategy: options.strategy });
      console.log(formatSplitsTable(cells));
      return 0;
    } catch (error) {
      console.error(`splits: ${(error as Error).message}`);
      return 1;
    }
  }
  let tokenizer;
  try {
    tokenizer = await loadChatTemplate(options.template);
  } catch (error) {
    console.error(`splits: ${(error as Error).message}`);
    return 2;
  }
  try {
    const { trajectories, files } = await loadTranscripts(options.paths);
    const { report } = measureSplits(trajectories, tokenizer, {
      template: options.template,
      policy_output: options.policy_output,
      strategy: options.strategy,
      files,
      ...(options.enable_thinking !== undefined
        ? { enable_thinking: options.enable_thinking }
        : {}),
    });
    console.log(formatSplitsReport(report));
    return 0;
  } catch (error) {
    console.error(`splits: ${(error as Error).message}`);
    return 1;
  }
}

if (import.meta.main) Deno.exit(await main(Deno.args));
