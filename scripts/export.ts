/**
 * `deno task export`: converts a checkpoint of the built-in decoder (ours, or a Qwen3 directory
 * in the Hugging Face layout) to GGUF for llama.cpp and/or to the Hugging Face layout.
 *
 * Usage: `deno task export --checkpoint <file|dir> [--gguf <out.gguf> --type f32|f16|q8_0|q4_0]
 * [--hf <dir> --dtype float32|bfloat16|float16] [--tokenizer <dir>] [--max-shard-bytes N]`.
 * Prints what it wrote as JSON. Bad flags exit 2 with a message naming the flag.
 *
 * @module
 */
import { intFlag, parseFlags } from "../lib/flags.ts";
import { exportCheckpoint, ExportError, GGUF_TYPES, HF_DTYPES } from "../lib/engine/mod.ts";

const USAGE = `usage: deno task export --checkpoint <file|dir> [--gguf <out.gguf> --type ${
  GGUF_TYPES.join("|")
}]
       [--hf <dir> --dtype ${HF_DTYPES.join("|")}] [--tokenizer <dir>] [--max-shard-bytes N]

  --checkpoint  a reins checkpoint (POST /save) or a Qwen3 directory in the Hugging Face layout
  --gguf        GGUF file to write (llama.cpp architecture qwen3); --type (default f16)
  --hf          Hugging Face directory to write: config.json, model.safetensors, tokenizer files
  --tokenizer   directory with the model's tokenizer.json (default: the checkpoint directory's)`;

async function main(argv: string[]): Promise<number> {
  const flags = parseFlags(argv, {
    checkpoint: { type: "string" },
    gguf: { type: "string" },
    type: { type: "string", default: "f16" },
    hf: { type: "string" },
    dtype: { type: "string", default: "float32" },
    tokenizer: { type: "string" },
    "max-shard-bytes": { type: "string" },
  }, USAGE);
  if (!flags) return 0;
  if (!flags.checkpoint) throw new ExportError("--checkpoint: is required");
  if (!GGUF_TYPES.includes(flags.type as never)) {
    throw new ExportError(`--type: expected one of ${GGUF_TYPES.join(", ")}, got '${flags.type}'`);
  }
  if (!HF_DTYPES.includes(flags.dtype as never)) {
    throw new ExportError(`--dtype: expected one of ${HF_DTYPES.join(", ")}, got '${flags.dtype}'`);
  }
  if (!flags.gguf && !flags.hf) {
    throw new ExportError("--gguf: give --gguf <file> and/or --hf <dir>");
  }
  let maxShardBytes: number | undefined;
  try {
    maxShardBytes = intFlag("max-shard-bytes", flags["max-shard-bytes"], 1);
  } catch (error) {
    throw new ExportError((error as Error).message);
  }
  const result = await exportCheckpoint({
    checkpoint: flags.checkpoint,
    gguf: flags.gguf,
    type: flags.type as typeof GGUF_TYPES[number],
    hf: flags.hf,
    dtype: flags.dtype as typeof HF_DTYPES[number],
    tokenizer: flags.tokenizer,
    maxShardBytes,
  });
  console.log(JSON.stringify(result, null, 2));
  return 0;
}

if (import.meta.main) {
  try {
    Deno.exit(await main(Deno.args));
  } catch (error) {
    console.error(`error: ${error instanceof Error ? error.message : error}`);
    Deno.exit(error instanceof ExportError || error instanceof TypeError ? 2 : 1);
  }
}
