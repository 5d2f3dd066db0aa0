/**
 * File and shell tools acting inside the agent's working directory (the files and coding
 * environments). Paths are relative to the workdir; absolute paths and `..` are refused. The
 * tools do not defend against reading `.git` or reaching the network: that is the sandbox's job
 * (the controller's stages), and the reward-hacking tests check it there.
 *
 * @module
 */
import { type AgentTool, stringArg, ToolArgumentError, type ToolContext } from "../builtin/tool.ts";

/**
 * Resolves a workspace-relative path or throws naming the argument.
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * import { workspacePath } from "./workspace_tools.ts";
 * assert.equal(workspacePath("/w", "src/a.py"), "/w/src/a.py");
 * ```
 */
export function workspacePath(workdir: string, path: string, arg = "path"): string {
  const clean = path.trim().replace(/^\.\/+/, "");
  if (clean === "" || clean.startsWith("/") || clean.split("/").includes("..")) {
    throw new ToolArgumentError(
      `argument "${arg}" must be a relative path inside the workspace, got ${JSON.stringify(path)}`,
    );
  }
  return `${workdir}/${clean}`;
}

const pathParam = { type: "string", description: "Path relative to the workspace." };

async function walk(root: string, dir: string, out: string[], limit: number): Promise<void> {
  const entries: Deno.DirEntry[] = [];
  for await (const entry of Deno.readDir(dir)) entries.push(entry);
  entries.sort((a, b) => a.name.localeCompare(b.name));
  for (const entry of entries) {
    if (out.length >= limit) return;
    if (entry.name === "__pycache__") continue;
    const full = `${dir}/${entry.name}`;
    if (entry.isDirectory) {
      out.push(`${full.slice(root.length + 1)}/`);
      await walk(root, full, out, limit);
    } else {
      out.push(full.slice(root.length + 1));
    }
  }
}

/** `list_files`, `read_file`, `write_file`, `edit_file`, `delete_file`. */
export function fileTools(ctx: ToolContext): AgentTool[] {
  const at = (args: Record<string, unknown>, name = "path") =>
    workspacePath(ctx.workdir, stringArg(args as never, name), name);
  return [
    {
      name: "list_files",
      description: "Lists the files under a directory of the workspace (default: all).",
      parameters: { type: "object", properties: { path: pathParam } },
      run: async (args) => {
        const dir = typeof args.path === "string" && args.path.trim() !== "" &&
            args.path.trim() !== "."
          ? at(args)
          : ctx.workdir;
        const out: string[] = [];
        await walk(dir, dir, out, 500);
        return out.length > 0 ? out.join("\n") : "(empty)";
      },
    },
    {
      name: "read_file",
      description: "Returns the content of a file of the workspace.",
      parameters: { type: "object", properties: { path: pathParam }, required: ["path"] },
      run: async (args) => await Deno.readTextFile(at(args)),
    },
    {
      name: "write_file",
      description: "Writes (creates or replaces) a file of the workspace.",
      parameters: {
        type: "object",
        properties: { path: pathParam, content: { type: "string" } },
        required: ["path", "content"],
      },
      run: async (args) => {
        const path = at(args);
        const content = stringArg(args, "content");
        await Deno.mkdir(path.slice(0, path.lastIndexOf("/")), { recursive: true });
        await Deno.writeTextFile(path, content);
        return `wrote ${content.length} characters to ${stringArg(args, "path")}`;
      },
    },
    {
      name: "edit_file",
      description: "Replaces one exact occurrence of old_text by new_text in a file.",
      parameters: {
        type: "object",
        properties: { path: pathParam, old_text: { type: "string" }, new_text: { type: "string" } },
        required: ["path", "old_text", "new_text"],
      },
      run: async (args) => {
        const path = at(args);
        const oldText = stringArg(args, "old_text");
        const text = await Deno.readTextFile(path);
        const count = oldText === "" ? 0 : text.split(oldText).length - 1;
        if (count !== 1) {
          throw new ToolArgumentError(
            `argument "old_text" must occur exactly once in the file (found ${count})`,
          );
        }
        await Deno.writeTextFile(path, text.replace(oldText, () => stringArg(args, "new_text")));
        return `edited ${stringArg(args, "path")}`;
      },
    },
    {
      name: "delete_file",
      description: "Deletes a file of the workspace.",
      parameters: { type: "object", properties: { path: pathParam }, required: ["path"] },
      run: async (args) => {
        await Deno.remove(at(args));
        return `deleted ${stringArg(args, "path")}`;
      },
    },
  ];
}

/** `bash`: runs a command with `bash -c` in the workspace (timeout, output capped). */
export function bashTool(ctx: ToolContext, timeoutMs = 30_000): AgentTool {
  return {
    name: "bash",
    description: "Runs a shell command in the workspace and returns its exit code and output.",
    parameters: {
      type: "object",
      properties: { command: { type: "string", description: "A bash command line." } },
      required: ["command"],
    },
    run: async (args) => {
      const command = stringArg(args, "command");
      const out = await new Deno.Command("bash", {
        args: ["-c", command],
        cwd: ctx.workdir,
        stdin: "null",
        stdout: "piped",
        stderr: "piped",
        signal: AbortSignal.timeout(timeoutMs),
      }).output();
      const dec = new TextDecoder();
      const text = (dec.decode(out.stdout) + dec.decode(out.stderr)).slice(-8000);
      return `exit code ${out.code}${out.signal ? ` (signal ${out.signal})` : ""}\n${text}`;
    },
  };
}
