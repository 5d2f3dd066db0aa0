/**
 * Scripted policies that drive each real CLI through a small bug fix, for integration tests
 * and smoke checks against `startScriptedUpstream` (lib/proxy/scripted_upstream.ts).
 *
 * The policy reads what a model would read: the rendered prompt (Qwen3 chat template). It
 * finds the CLI's tools in the `<tools>` block and how far the task got from the number of
 * `<tool_response>` blocks, then replays, with that CLI's own tool names and argument names:
 * read `calc.py`, edit it, and give a final answer. Side conversations the CLI opens on its own
 * (OpenCode's title generator, Qwen Code's memory extraction) get a short plain answer.
 *
 * @module
 */
import type { CliName } from "./schema.ts";
import type { ScriptedPolicyInput, ScriptedTurn } from "../../proxy/scripted_upstream.ts";

/** The planted bug and its fixes (see `tests/fixtures/harness_cli/bugfix`). */
export const BUGFIX = {
  file: "calc.py",
  buggy: "return a - b",
  correct: "return a + b",
  wrong: "return a * b",
} as const;

/**
 * Which fix the scripted agent applies; `answer` makes it answer at once without tools (Qwen
 * Code opens its memory-extraction side conversation only after such a turn).
 */
export type ScriptedFix = "correct" | "wrong" | "answer";

/** Options of {@link cliScriptedPolicy}. */
export interface CliScriptOptions {
  /** Absolute path of the agent's working directory (for CLIs whose tools want absolute paths). */
  workdir: string;
  fix: ScriptedFix;
}

/** What the policy made of one prompt (exposed for assertions). */
export interface PromptView {
  system: string;
  tools: string[];
  toolResponses: number;
}

/**
 * Reads the system text, the offered tool names and the number of tool results out of a
 * Qwen3-rendered prompt.
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * import { viewPrompt } from "./scripted.ts";
 * const text = '<|im_start|>system\nhi\n\n# Tools\n<tools>\n{"type": "function", "function": ' +
 *   '{"name": "edit"}}\n</tools><|im_end|>\n<|im_start|>user\n<tool_response>\nok\n</tool_response>';
 * assert.deepEqual(viewPrompt(text).tools, ["edit"]);
 * ```
 */
export function viewPrompt(promptText: string): PromptView {
  const start = promptText.indexOf("<|im_start|>system\n");
  const end = promptText.indexOf("<|im_end|>", Math.max(0, start));
  const system = start >= 0 && end > start ? promptText.slice(start + 19, end) : "";
  const toolsBlock = /<tools>\n([\s\S]*?)\n<\/tools>/.exec(system)?.[1] ?? "";
  const tools: string[] = [];
  for (const line of toolsBlock.split("\n")) {
    try {
      const parsed = JSON.parse(line) as { name?: string; function?: { name?: string } };
      const name = parsed.function?.name ?? parsed.name;
      if (name) tools.push(name);
    } catch { /* not one JSON tool per line */ }
  }
  const rest = end > 0 ? promptText.slice(end) : promptText;
  const toolResponses = rest.split("<tool_response>").length - 1;
  return { system, tools, toolResponses };
}

interface Steps {
  /** Tool that must be offered in the main conversation. */
  edit: string;
  read: ScriptedTurn["tool_calls"];
  write: ScriptedTurn["tool_calls"];
}

/** The read and edit tools of a CLI whose edit tool takes a path and old/new strings. */
interface EditTools {
  read: string;
  edit: string;
  /** Argument names: the path, the text replaced, its replacement. */
  args: readonly [string, string, string];
}

const EDIT_TOOLS: Record<Exclude<CliName, "codex">, EditTools> = {
  claude_code: { read: "Read", edit: "Edit", args: ["file_path", "old_string", "new_string"] },
  opencode: { read: "read", edit: "edit", args: ["filePath", "oldString", "newString"] },
  qwen_code: { read: "read_file", edit: "edit", args: ["file_path", "old_string", "new_string"] },
};

function steps(cli: CliName, workdir: string, next: string): Steps {
  const path = `${workdir.replace(/\/$/, "")}/${BUGFIX.file}`;
  if (cli === "codex") {
    return {
      edit: "exec_command",
      read: [{ name: "exec_command", arguments: { cmd: `cat ${BUGFIX.file}` } }],
      write: [{
        name: "exec_command",
        arguments: { cmd: `sed -i 's/${BUGFIX.buggy}/${next}/' ${BUGFIX.file}` },
      }],
    };
  }
  const { read, edit, args: [pathArg, oldArg, newArg] } = EDIT_TOOLS[cli];
  return {
    edit,
    read: [{ name: read, arguments: { [pathArg]: path } }],
    write: [{
      name: edit,
      arguments: { [pathArg]: path, [oldArg]: BUGFIX.buggy, [newArg]: next },
    }],
  };
}

/** Markers of the side conversations the CLIs open by themselves. */
export const SIDE_CONVERSATIONS: Record<string, RegExp> = {
  title: /title generator/i,
  memory: /memory extraction/i,
};

/**
 * A scripted policy that fixes (or, with `fix: "wrong"`, mis-fixes) `calc.py` through `cli`'s
 * own tools: read, edit, final answer.
 *
 * @example
 * ```ts
 * import { startScriptedUpstream } from "../../proxy/scripted_upstream.ts";
 * import { loadQwen3Tokenizer } from "../../tokens/qwen3.ts";
 * import { cliScriptedPolicy } from "./scripted.ts";
 * const upstream = await startScriptedUpstream({
 *   tokenizer: await loadQwen3Tokenizer(),
 *   policy: cliScriptedPolicy("codex", { workdir: "/tmp/w", fix: "correct" }),
 * });
 * // point the proxy's token-level upstream at upstream.url, then run codex through the proxy
 * await upstream.close();
 * ```
 */
export function cliScriptedPolicy(
  cli: CliName,
  options: CliScriptOptions,
): (input: ScriptedPolicyInput) => ScriptedTurn {
  const next = options.fix === "correct" ? BUGFIX.correct : BUGFIX.wrong;
  const answer = options.fix === "answer";
  const plan = steps(cli, options.workdir, next);
  return ({ promptText }) => {
    const view = viewPrompt(promptText);
    if (SIDE_CONVERSATIONS.title.test(view.system)) return { content: "Fix add in calc.py" };
    if (SIDE_CONVERSATIONS.memory.test(view.system)) {
      return { content: "Nothing durable to remember." };
    }
    if (!view.tools.includes(plan.edit)) {
      // Not the main conversation (or the CLI changed its tools): answer without tools.
      return { content: `No ${plan.edit} tool offered; nothing to do.` };
    }
    if (answer) return { content: `The bug is in ${BUGFIX.file}: add() subtracts.` };
    if (view.toolResponses === 0) return { content: "", tool_calls: plan.read };
    if (view.toolResponses === 1) return { content: "", tool_calls: plan.write };
    return { content: `Fixed calc.py: add() now does ${next.replace("return ", "")}.` };
  };
}
