import assert from "node:assert/strict";
import { CHAR_TOKENIZER_DIR, loadHfTokenizer, loadHfTokenizerFromDir } from "../lib/tokens/mod.ts";
import { ValidationError } from "../lib/schema.ts";

const tokenizerJson = JSON.parse(
  await Deno.readTextFile(new URL("tokenizer.json", CHAR_TOKENIZER_DIR)),
);
const tokenizerConfig = JSON.parse(
  await Deno.readTextFile(new URL("tokenizer_config.json", CHAR_TOKENIZER_DIR)),
);

Deno.test("hf loader: builds from parsed JSON, with a name and eos from the config", () => {
  const tok = loadHfTokenizer(tokenizerJson, tokenizerConfig, { name: "toy" });
  assert.equal(tok.name, "toy");
  assert.deepEqual([...tok.eosTokenIds], [tok.tokenId("<|im_end|>")]);
  assert.equal(tok.render([{ role: "user", content: "a" }]), "<|im_start|>user\na<|im_end|>\n");
});

Deno.test("hf loader: reads chat_template.jinja when the config has no template", async () => {
  const dir = await Deno.makeTempDir();
  try {
    const { chat_template: _, ...config } = tokenizerConfig;
    await Deno.writeTextFile(`${dir}/tokenizer.json`, JSON.stringify(tokenizerJson));
    await Deno.writeTextFile(`${dir}/tokenizer_config.json`, JSON.stringify(config));
    await Deno.writeTextFile(
      `${dir}/chat_template.jinja`,
      "{% for m in messages %}[{{ m.role }}]{{ m.content }}{% endfor %}",
    );
    const tok = await loadHfTokenizerFromDir(dir);
    assert.equal(tok.render([{ role: "user", content: "x" }]), "[user]x");
    await Deno.remove(`${dir}/chat_template.jinja`);
    const bare = await loadHfTokenizerFromDir(dir, { name: "bare" });
    assert.throws(() => bare.render([]), /bare has no chat_template/);
    assert.equal(bare.decode(bare.encode("still encodes")), "still encodes");
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
});

Deno.test("hf loader: a list of named templates uses tool_use when tools are given", () => {
  const tok = loadHfTokenizer(tokenizerJson, {
    ...tokenizerConfig,
    chat_template: [
      { name: "default", template: "plain" },
      { name: "tool_use", template: "with tools" },
    ],
  });
  assert.equal(tok.render([]), "plain");
  assert.equal(tok.render([], { tools: [{ type: "function" }] }), "with tools");
});

Deno.test("hf loader: bad files and fields are named in the error", async () => {
  assert.throws(
    () => loadHfTokenizer(tokenizerJson, { ...tokenizerConfig, chat_template: 5 }),
    (error: unknown) =>
      error instanceof ValidationError && error.field.includes("tokenizer_config.json") &&
      error.message.includes("chat_template"),
  );
  assert.throws(
    () => loadHfTokenizer({ ...tokenizerJson, added_tokens: [{ id: -1, content: "x" }] }, {}),
    /tokenizer\.json: added_tokens\[0\]\.id/,
  );
  assert.throws(
    () => loadHfTokenizer({ ...tokenizerJson, model: {} }, {}),
    /tokenizer\.json: model\.vocab/,
  );
  // The vocabulary is checked in a plain loop (not z.record): a bad id is still named.
  const vocab = { ...tokenizerJson.model.vocab, "<bad>": 1.5 };
  assert.throws(
    () => loadHfTokenizer({ ...tokenizerJson, model: { ...tokenizerJson.model, vocab } }, {}),
    /tokenizer\.json: model\.vocab.*<bad>.*non-negative integer id, got 1\.5/,
  );
  assert.throws(
    () => loadHfTokenizer({ ...tokenizerJson, model: { ...tokenizerJson.model, vocab: 7 } }, {}),
    /tokenizer\.json: model\.vocab/,
  );
  assert.throws(
    () => loadHfTokenizer(tokenizerJson, { ...tokenizerConfig, chat_template: "{% if %}" }),
    /chat_template "default" does not compile/,
  );
  assert.throws(
    () => loadHfTokenizer(tokenizerJson, tokenizerConfig, { eosTokens: ["<nope>"] }),
    /eosTokens: "<nope>" is not in the vocabulary/,
  );
  await assert.rejects(
    () => loadHfTokenizerFromDir("/nonexistent/reins-tokenizer"),
    /cannot read \/nonexistent\/reins-tokenizer\/tokenizer/,
  );
  const dir = await Deno.makeTempDir();
  try {
    await Deno.writeTextFile(`${dir}/tokenizer.json`, "{ not json");
    await Deno.writeTextFile(`${dir}/tokenizer_config.json`, "{}");
    await assert.rejects(() => loadHfTokenizerFromDir(dir), /tokenizer\.json: not valid JSON/);
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
});
