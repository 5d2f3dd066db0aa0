/**
 * Schemas of the tokens area: the parts of Hugging Face `tokenizer.json` and
 * `tokenizer_config.json` that reins reads itself (the rest is handed to
 * `@huggingface/tokenizers` untouched).
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * import { parseOrThrow } from "../schema/core.ts";
 * import { TokenizerConfigSchema } from "./schema.ts";
 * const config = parseOrThrow(TokenizerConfigSchema, {
 *   chat_template: "{{ messages[0].content }}",
 *   eos_token: "<|im_end|>",
 * });
 * assert.equal(config.eos_token, "<|im_end|>");
 * ```
 *
 * @module
 */
import { z } from "zod";

/** One entry of `tokenizer.json`'s `added_tokens`. */
export const AddedTokenSchema = z.object({
  id: z.number().int().min(0),
  content: z.string().min(1),
  single_word: z.boolean().default(false),
  lstrip: z.boolean().default(false),
  rstrip: z.boolean().default(false),
  normalized: z.boolean().default(false),
  special: z.boolean().default(false),
});
/** One entry of `tokenizer.json`'s `added_tokens`. */
export type AddedToken = z.infer<typeof AddedTokenSchema>;

/**
 * A BPE vocabulary (token → id), checked in one plain loop over its entries: `z.record` checks
 * a Qwen3 vocabulary's 151,643 entries one schema call each and copies them, which was about
 * half the time a tokenizer took to load (every gateway, proxy and test start pays it).
 */
const VocabRecordSchema = z.custom<Record<string, number>>(
  (value) => typeof value === "object" && value !== null && !Array.isArray(value),
  { message: "expected an object mapping each token to its id" },
).superRefine((vocab, ctx) => {
  for (const token in vocab) {
    const id = vocab[token];
    if (!Number.isInteger(id) || id < 0) {
      ctx.addIssue({
        code: "custom",
        path: [token],
        message: `expected a non-negative integer id, got ${JSON.stringify(id)}`,
      });
      return;
    }
  }
});

/** The fields of `tokenizer.json` reins checks before building a tokenizer (others pass through). */
export const TokenizerJsonSchema = z.looseObject({
  added_tokens: z.array(AddedTokenSchema).default([]),
  model: z.looseObject({
    type: z.string().optional(),
    vocab: z.union([VocabRecordSchema, z.array(z.unknown())]),
  }),
  normalizer: z.unknown().optional(),
  pre_tokenizer: z.unknown().optional(),
  post_processor: z.unknown().optional(),
  decoder: z.unknown().optional(),
});
/** The fields of `tokenizer.json` reins checks. */
export type TokenizerJson = z.infer<typeof TokenizerJsonSchema>;

/** A special token in `tokenizer_config.json`: a string, an AddedToken-like object, or null. */
export const SpecialTokenValueSchema = z.union([
  z.string(),
  z.looseObject({ content: z.string() }),
  z.null(),
]);

/** A chat template: one string, or a list of named templates (the one named "default" wins). */
export const ChatTemplateValueSchema = z.union([
  z.string().min(1),
  z.array(z.object({ name: z.string(), template: z.string().min(1) })).min(1),
]);

/** The fields of `tokenizer_config.json` reins reads (others pass through). */
export const TokenizerConfigSchema = z.looseObject({
  chat_template: ChatTemplateValueSchema.optional(),
  bos_token: SpecialTokenValueSchema.optional(),
  eos_token: SpecialTokenValueSchema.optional(),
  unk_token: SpecialTokenValueSchema.optional(),
  pad_token: SpecialTokenValueSchema.optional(),
  clean_up_tokenization_spaces: z.boolean().optional(),
});
/** The fields of `tokenizer_config.json` reins reads. */
export type TokenizerConfig = z.infer<typeof TokenizerConfigSchema>;
