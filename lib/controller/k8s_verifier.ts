/**
 * The two reins programs of a verified Kubernetes pod (see `k8s_pod.ts`), run from the runner
 * image: `verify` (after the agent exited: builds the verification tree and runs the reward
 * command, writing `result.json`) and `report` (the only container holding the reporter key:
 * posts the reward through the gateway client and writes what it posted as its termination
 * message, which the controller reads).
 *
 * ```sh
 * deno run -A lib/controller/k8s_verifier.ts verify   # in reins-verify
 * deno run -A lib/controller/k8s_verifier.ts report   # in reins-report
 * ```
 *
 * Paths come from `POD_PATHS` and can be moved with `$REINS_POD_ROOT` (tests).
 *
 * @module
 */
import { GatewayClient } from "../gateway/client.ts";
import { parseOrThrow, type Rollout } from "../schema.ts";
import { RewardHookSchema } from "./schema.ts";
import { POD_PATHS } from "./k8s_pod.ts";
import { buildVerifyTree, runRewardHook } from "./reward_hooks.ts";

/** What `verify` writes and `report` posts. */
export interface VerifyResult {
  reward: number;
  edited: string[];
  restored: string[];
  info: Record<string, unknown> & { flags: string[] };
}

function path(key: keyof typeof POD_PATHS): string {
  return (Deno.env.get("REINS_POD_ROOT") ?? "") + POD_PATHS[key];
}

async function exists(p: string): Promise<boolean> {
  return await Deno.lstat(p).then(() => true, () => false);
}

/**
 * Removes every symbolic link of the tree that leads outside it: the agent could otherwise plant
 * `answer.txt -> /reins/answers/expected`, which resolves in the verifier's container, where the
 * answers are mounted. Returns the removed links (relative paths).
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * import { removeEscapingLinks } from "./k8s_verifier.ts";
 * const tree = await Deno.makeTempDir();
 * await Deno.writeTextFile(`${tree}/solution.txt`, "3");
 * await Deno.symlink("solution.txt", `${tree}/inside.txt`);
 * await Deno.symlink("/etc/hostname", `${tree}/answer.txt`);
 * assert.deepEqual(await removeEscapingLinks(tree), ["answer.txt"]);
 * await Deno.remove(tree, { recursive: true });
 * ```
 */
export async function removeEscapingLinks(tree: string): Promise<string[]> {
  const removed: string[] = [];
  const root = await Deno.realPath(tree);
  const walk = async (dir: string, rel: string) => {
    for await (const entry of Deno.readDir(dir)) {
      const full = `${dir}/${entry.name}`;
      const relPath = rel ? `${rel}/${entry.name}` : entry.name;
      if (entry.isSymlink) {
        const target = await Deno.realPath(full).catch(() => null);
        if (target === null || (target !== root && !target.startsWith(`${root}/`))) {
          await Deno.remove(full);
          removed.push(relPath);
        }
      } else if (entry.isDirectory) {
        await walk(full, relPath);
      }
    }
  };
  await walk(root, "");
  return removed.sort();
}

/** Copies the task files (the ConfigMap's tree) over the verification tree. */
async function layFiles(from: string, to: string): Promise<string[]> {
  const laid: string[] = [];
  const walk = async (dir: string, rel: string) => {
    for await (const entry of Deno.readDir(dir)) {
      // A mounted ConfigMap holds `..data` links and timestamped dirs: skip the dot entries.
      if (entry.name.startsWith("..")) continue;
      const relPath = rel ? `${rel}/${entry.name}` : entry.name;
      const info = await Deno.stat(`${dir}/${entry.name}`);
      if (info.isDirectory) {
        await walk(`${dir}/${entry.name}`, relPath);
      } else {
        const target = `${to}/${relPath}`;
        await Deno.mkdir(target.slice(0, target.lastIndexOf("/")), { recursive: true });
        await Deno.remove(target, { recursive: true }).catch(() => {});
        await Deno.copyFile(`${dir}/${entry.name}`, target);
        laid.push(relPath);
      }
    }
  };
  if (await exists(from)) await walk(from, "");
  return laid.sort();
}

/** `verify`: the reward of the tree the agent left. Exit 1 when the command cannot run. */
export async function verify(): Promise<VerifyResult> {
  const hook = parseOrThrow(RewardHookSchema, JSON.parse(Deno.env.get("REINS_REWARD") ?? "{}"));
  const tree = `${path("scratch")}/verify`;
  const pristine = path("pristine");
  const { edited, restored } = await buildVerifyTree(path("workspace"), pristine, tree, [
    ...hook.restore,
  ]);
  const escaping = await removeEscapingLinks(tree);
  const laid = await layFiles(path("task"), tree);
  const inputFile = `${path("scratch")}/input.json`;
  await Deno.writeTextFile(inputFile, Deno.env.get("REINS_INPUT") ?? "null");
  const ctx = {
    rollout: { rollout_id: Deno.env.get("REINS_ROLLOUT_ID") ?? "" } as Rollout,
    attempt_id: Deno.env.get("REINS_ATTEMPT_ID") ?? "",
    dir: tree,
    exit_code: 0,
    edited,
  };
  const result = await runRewardHook(hook, ctx, {}, {
    PATH: Deno.env.get("PATH") ?? "/usr/local/bin:/usr/bin:/bin",
    HOME: path("scratch"),
    REINS_ROLLOUT_ID: ctx.rollout.rollout_id,
    REINS_ATTEMPT_ID: ctx.attempt_id,
    REINS_INPUT_FILE: inputFile,
    REINS_WORKDIR: tree,
    REINS_ANSWERS_DIR: path("answers"),
  });
  const reward = edited.length > 0 && hook.edited_restore_reward !== null
    ? hook.edited_restore_reward
    : result.value;
  const out: VerifyResult = {
    reward,
    edited,
    restored,
    info: {
      ...result.info,
      files: laid,
      ...(escaping.length ? { removed_links: escaping } : {}),
      flags: [
        ...(edited.length ? ["edited_tests"] : []),
        ...(escaping.length ? ["escaping_symlink"] : []),
      ],
    },
  };
  await Deno.writeTextFile(`${path("result")}/result.json`, JSON.stringify(out));
  return out;
}

/** `report`: posts the reward with the reporter key; returns the termination message. */
export async function report(): Promise<Record<string, unknown>> {
  const result = JSON.parse(await Deno.readTextFile(`${path("result")}/result.json`));
  const reward = Number(result.reward);
  if (!Number.isFinite(reward)) throw new Error(`result.json: reward is not a number`);
  const apiKey = (await Deno.readTextFile(`${path("reporter")}/key`)).trim();
  const env = (name: string) => {
    const value = Deno.env.get(name);
    if (!value) throw new Error(`$${name}: required`);
    return value;
  };
  const gateway = new GatewayClient(env("REINS_GATEWAY_URL"), { apiKey });
  const [event] = await gateway.postEvents(env("REINS_ROLLOUT_ID"), env("REINS_ATTEMPT_ID"), [{
    type: "reward",
    event_key: env("REINS_EVENT_KEY"),
    payload: {
      value: reward,
      info: {
        source: "k8s_verifier",
        edited: result.edited ?? [],
        restored: result.restored ?? [],
        flags: result.info?.flags ?? [],
      },
    },
  }]);
  // The termination message is at most 4096 bytes: only the facts, not the tails.
  const message = {
    reward,
    posted: true,
    credential: "reporter",
    seq: event.seq,
    event_key: event.event_key,
    edited: result.edited ?? [],
    flags: result.info?.flags ?? [],
  };
  const terminationLog = Deno.env.get("REINS_TERMINATION_LOG") ?? "/dev/termination-log";
  await Deno.writeTextFile(terminationLog, JSON.stringify(message)).catch(() => {});
  return message;
}

if (import.meta.main) {
  const stage = Deno.args[0];
  try {
    if (stage === "verify") {
      const out = await verify();
      console.log(`verified: reward ${out.reward}, edited [${out.edited.join(", ")}]`);
      const tail = (out.info.stdout_tail ?? "") as string;
      if (tail) console.log(tail.trimEnd());
    } else if (stage === "report") {
      console.log(`reported: ${JSON.stringify(await report())}`);
    } else {
      throw new Error(`expected verify or report, got ${JSON.stringify(stage)}`);
    }
  } catch (error) {
    console.error(`k8s_verifier ${stage}: ${error instanceof Error ? error.message : error}`);
    Deno.exit(1);
  }
}
