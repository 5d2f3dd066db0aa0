/**
 * How a local attempt ended, from what its directory holds: the exit code the wrapper (or the
 * in-process runner) wrote, the watchdog's verdict, the sandbox's command log, and the reward
 * hook run on the verification tree outside the agent's reach.
 *
 * @module
 */
import type { JsonObject, Rollout } from "../schema.ts";
import type { SandboxStages } from "./schema.ts";
import type { AttemptOutcome, LogChunk } from "./backend.ts";
import { type AttemptState, readExitCode, scrubbedEnv } from "./local_process.ts";
import { buildVerifyTree, type RewardFunction, runRewardHook } from "./reward_hooks.ts";

/** Why the controller ended an attempt itself (it wins over what the attempt wrote). */
export interface KillVerdict {
  status: "cancelled" | "lost" | "timeout";
  reason: string;
}

/** What {@link finishAttempt} needs besides the attempt's state. */
export interface FinishContext {
  rollout: Rollout;
  state: AttemptState;
  dir: string;
  killed: KillVerdict | null;
  rewardFunctions: Record<string, RewardFunction>;
  log?: (chunk: LogChunk) => void;
}

function exitError(code: number, state: AttemptState): string {
  if (state.runner === "in_process") return `in-process harness ended with status ${code}`;
  return code > 128
    ? `harness killed by signal ${code - 128} (exit status ${code})`
    : code === 127
    ? `harness command not found: ${JSON.stringify(state.harness.command[0])} (exit code 127)`
    : `harness exited with code ${code}`;
}

async function readCommandLog(dir: string, info: JsonObject, log?: (c: LogChunk) => void) {
  try {
    const commands = (await Deno.readTextFile(`${dir}/private/commands.log`)).split("\n")
      .filter((line) => line.length > 0).map((line) => line.slice(line.indexOf("\t") + 1));
    info.commands = commands.slice(-500);
    const flags: string[] = [];
    if (commands.some((c) => /(^|[\s;&|(])git(\s|$)/.test(c))) flags.push("git_attempt");
    if (commands.some((c) => /\b(curl|wget|nc|ssh)\b/.test(c))) flags.push("network_attempt");
    info.flags = flags;
    if (commands.length > 0 && log) {
      const text = commands.map((c) => `$ ${c}`).join("\n");
      log({ stream: "system", offset: 0, end: 0, text });
    }
  } catch { /* no commands logged */ }
}

/**
 * The outcome of an attempt that ended (or was ended): `killed` wins; else the exit code
 * decides, and a clean exit runs the reward hook, if any.
 *
 * @example
 * ```ts ignore
 * const outcome = await finishAttempt({ rollout, state, dir, killed: null, rewardFunctions: {} });
 * ```
 */
export async function finishAttempt(ctx: FinishContext): Promise<AttemptOutcome> {
  const { rollout, state, dir } = ctx;
  const info: JsonObject = {
    backend: "local",
    pid: state.pid,
    workdir: `${dir}/work`,
    ...(state.runner === "in_process" ? { runner: "in_process" } : {}),
  };
  const stages: SandboxStages = state.stages
    ? structuredClone(state.stages)
    : { requested: [], applied: [], skipped: {} };
  if (state.command_log) await readCommandLog(dir, info, ctx.log);
  const outcome = (
    status: AttemptOutcome["status"],
    exit: number | null,
    error: string | null,
  ) => {
    if (state.stages || state.harness.reward) info.sandbox_stages = stages;
    return { status, exit_code: exit, error, reward: null, info } satisfies AttemptOutcome;
  };
  if (ctx.killed) return outcome(ctx.killed.status, null, ctx.killed.reason);
  const code = readExitCode(dir);
  if (code === null) {
    if (state.runner === "in_process") {
      return outcome(
        "lost",
        null,
        `the in-process attempt ran inside controller process ${state.pid} and left no exit ` +
          "status: it ended with that process (in-process attempts do not outlive their " +
          "controller)",
      );
    }
    try {
      Deno.statSync(`${dir}/exit_code.timeout`);
      return outcome("timeout", null, `timed out after ${rollout.config.timeout_s}s (watchdog)`);
    } catch { /* no watchdog verdict either */ }
    return outcome("lost", null, "the attempt's process ended without an exit status");
  }
  if (code !== 0) return outcome("failed", code, exitError(code, state));
  const hook = state.harness.reward;
  if (!hook) return outcome("succeeded", 0, null);
  let verifyDir = `${dir}/work`;
  let edited: string[] = [];
  try {
    stages.requested.push("after:verify_outside_sandbox");
    if (state.harness.workspace) {
      stages.requested.push("after:verify_restored");
      verifyDir = `${dir}/verify`;
      const tree = await buildVerifyTree(
        `${dir}/work`,
        state.harness.workspace,
        verifyDir,
        hook.restore,
      );
      edited = tree.edited;
      info.verification = { restored: tree.restored, edited };
      stages.applied.push("after:verify_restored");
    } else if (hook.restore.length > 0) {
      stages.skipped["after:verify_restored"] = "no workspace to restore from";
    }
    const result = await runRewardHook(
      hook,
      { rollout, attempt_id: state.attempt_id, dir: verifyDir, exit_code: 0, edited },
      ctx.rewardFunctions,
      {
        ...scrubbedEnv(),
        REINS_ROLLOUT_ID: rollout.rollout_id,
        REINS_ATTEMPT_ID: state.attempt_id,
        REINS_INPUT_FILE: `${dir}/input.json`,
        REINS_WORKDIR: verifyDir,
      },
    );
    stages.applied.push("after:verify_outside_sandbox");
    let value = result.value;
    if (edited.length > 0) {
      info.flags = [...((info.flags as string[] | undefined) ?? []), "edited_tests"];
      if (hook.edited_restore_reward !== null) value = hook.edited_restore_reward;
    }
    info.reward_hook = result.info;
    const done = outcome("succeeded", 0, null);
    return { ...done, reward: value };
  } catch (error) {
    return outcome("failed", 0, `reward hook: ${(error as Error).message}`);
  }
}
