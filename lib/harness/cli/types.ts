/**
 * The contract every real-CLI adapter fulfils: which npm package and version it pins, and how
 * to turn one task into a command line, an environment and config files.
 *
 * This module and the adapters import nothing from npm, so that the runner (`run.ts`) starts
 * without an import map inside an attempt.
 *
 * @module
 */
import type { CliName } from "./schema.ts";

/** Everything an adapter needs to prepare one run. */
export interface CliContext {
  /** The task prompt given to the CLI. */
  task: string;
  /** The agent's working directory (the CLI's cwd). */
  workdir: string;
  /** A fresh, empty directory used as HOME (the CLI's config goes here). */
  home: string;
  /** Model name the CLI should send. */
  model: string;
  /** OpenAI-style base URL ending in `/v1`. */
  openaiBaseUrl: string;
  /** Anthropic-style base URL (no `/v1`). */
  anthropicBaseUrl: string;
  /** The API key (the attempt's capability token). */
  apiKey: string;
  /** Absolute path of the CLI's executable in the install cache. */
  bin: string;
}

/** A prepared run: what to spawn and which files to write first. */
export interface CliInvocation {
  argv: string[];
  env: Record<string, string>;
  /** Absolute path → content, written before the CLI starts. */
  files: Record<string, string>;
}

/** One real harness CLI. */
export interface CliAdapter {
  name: CliName;
  /** npm package name. */
  package: string;
  /** Pinned version. */
  version: string;
  /** Path of the executable inside the install prefix. */
  bin: string;
  /** Model name used when the harness options give none. */
  defaultModel: string;
  /** Lowest Node.js major version the CLI runs on (null: a native binary, no Node needed). */
  nodeMajor: number | null;
  /** Wire API the CLI speaks to the proxy. */
  wire: "openai_chat" | "openai_responses" | "anthropic_messages";
  /** Builds the command line, environment and config files. */
  prepare(ctx: CliContext): CliInvocation;
  /** Fix-ups after `npm install` (e.g. executable bits npm dropped). */
  postInstall?(prefix: string): Promise<void>;
}
