/**
 * Checkpoint conversion to the field's formats, run by the worker's Python
 * (`python3 -m reins_worker.export`: torch reads our checkpoints, and the GGUF and safetensors
 * writers live there): a GGUF for llama.cpp (f32, f16, q8_0, q4_0) and/or a Hugging Face Qwen3
 * directory for `transformers`, vLLM and SGLang.
 *
 * @example
 * ```ts ignore
 * import { exportCheckpoint } from "./export.ts";
 * const out = await exportCheckpoint({
 *   checkpoint: "runs/demo/policy.pt",
 *   gguf: "policy.gguf",
 *   type: "f32",
 *   tokenizer: "data/tokenizers/char",
 * });
 * console.log(out.gguf?.bytes);
 * ```
 *
 * @module
 */
import { resolve } from "node:path";
import { z } from "zod";
import { resolvePython, workerEnv, workerPackageDir } from "../trainer/local_worker.ts";

/** GGUF tensor types the exporter writes. */
export const GGUF_TYPES = ["f32", "f16", "q8_0", "q4_0"] as const;
/** Parameter dtypes of an exported Hugging Face directory. */
export const HF_DTYPES = ["float32", "bfloat16", "float16"] as const;

/**
 * What to convert, validated: a checkpoint and at least one output.
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * import { ExportRequestSchema } from "./export.ts";
 * const request = ExportRequestSchema.parse({ checkpoint: "policy.pt", gguf: "policy.gguf" });
 * assert.equal(request.type, "f16");
 * assert.equal(ExportRequestSchema.safeParse({ checkpoint: "policy.pt" }).success, false);
 * ```
 */
export const ExportRequestSchema = z.object({
  /** A reins checkpoint file (POST /save) or a Qwen3 directory in the HF layout. */
  checkpoint: z.string().min(1),
  /** GGUF file to write. */
  gguf: z.string().min(1).optional(),
  type: z.enum(GGUF_TYPES).default("f16"),
  /** HF directory to write (config.json, safetensors, tokenizer files). */
  hf: z.string().min(1).optional(),
  /** Default float32: lossless for fp32 master weights (bfloat16 halves the files). */
  dtype: z.enum(HF_DTYPES).default("float32"),
  /** Directory with the model's tokenizer.json (default: the checkpoint's, if it has one). */
  tokenizer: z.string().min(1).optional(),
  /** Shard the HF weights past this many bytes (default: one file). */
  maxShardBytes: z.number().int().positive().optional(),
  /** Python with torch (default: see resolvePython). */
  python: z.string().min(1).optional(),
}).refine((r) => r.gguf !== undefined || r.hf !== undefined, {
  message: "give gguf and/or hf",
  path: ["gguf"],
});
/** Input form of {@link ExportRequestSchema}. */
export type ExportRequest = z.input<typeof ExportRequestSchema>;

/** What the exporter wrote. */
export const ExportResultSchema = z.object({
  checkpoint: z.string(),
  config: z.record(z.string(), z.unknown()),
  gguf: z.object({
    path: z.string(),
    type: z.enum(GGUF_TYPES),
    bytes: z.number(),
    tensor_types: z.record(z.string(), z.number()),
  }).optional(),
  hf: z.object({ dir: z.string(), files: z.array(z.string()), dtype: z.enum(HF_DTYPES) })
    .optional(),
});
/** Output of {@link exportCheckpoint}. */
export type ExportResult = z.infer<typeof ExportResultSchema>;

/** The exporter refused its input; `message` names the flag (e.g. `--tokenizer: …`). */
export class ExportError extends Error {
  override name = "ExportError";
}

/**
 * Converts a checkpoint (see {@link ExportRequestSchema}); throws {@link ExportError} naming
 * the bad field.
 *
 * @example
 * ```ts ignore
 * import { exportCheckpoint } from "./export.ts";
 * await exportCheckpoint({ checkpoint: "qwen3-0.6b/", gguf: "q.gguf", type: "q8_0" });
 * ```
 */
export async function exportCheckpoint(request: ExportRequest): Promise<ExportResult> {
  const parsed = ExportRequestSchema.safeParse(request);
  if (!parsed.success) {
    const issue = parsed.error.issues[0];
    throw new ExportError(`${issue.path.join(".") || "(request)"}: ${issue.message}`);
  }
  const r = parsed.data;
  // The exporter runs in the worker's directory: paths are resolved against ours first.
  const args = ["-m", "reins_worker.export", "--checkpoint", resolve(r.checkpoint)];
  if (r.gguf) args.push("--gguf", resolve(r.gguf), "--type", r.type);
  if (r.hf) args.push("--hf", resolve(r.hf), "--dtype", r.dtype);
  if (r.tokenizer) args.push("--tokenizer", resolve(r.tokenizer));
  if (r.maxShardBytes) args.push("--max-shard-bytes", String(r.maxShardBytes));
  const { python } = await resolvePython(r.python);
  const output = await new Deno.Command(python, {
    args,
    cwd: workerPackageDir(),
    env: workerEnv(),
    stdout: "piped",
    stderr: "piped",
  }).output();
  const stderr = new TextDecoder().decode(output.stderr).trim();
  if (!output.success) {
    const reason = stderr.split("\n").filter((l) => l.trim()).at(-1) ?? `exit ${output.code}`;
    throw new ExportError(reason.replace(/^error: /, ""));
  }
  const lines = new TextDecoder().decode(output.stdout).trim().split("\n");
  return ExportResultSchema.parse(JSON.parse(lines.at(-1) ?? "{}"));
}
