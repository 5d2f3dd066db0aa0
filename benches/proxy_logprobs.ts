/**
 * Cost of per-token logprobs in the answers, per generated token: the proxy's streaming loop
 * (incremental detokenization + output parsing) alone, with the token attribution every
 * token-level generation now does (`PartTokens`), and with the wire entries a Responses stream
 * writes for every text token (`openaiTokenLogprob`: the token's text and exact bytes).
 * Prints `name: value` lines (ns per token, median of 9 runs over a 4096-token reasoning + content
 * + tool-call answer).
 *
 * Run: `deno run -A benches/proxy_logprobs.ts`
 *
 * @module
 */
import { openaiTokenLogprob, PartTokens } from "../lib/proxy/codecs/logprobs.ts";
import { OutputParser, type OutputPart } from "../lib/tokens/parse_output.ts";
import { loadQwen3Tokenizer } from "../lib/tokens/qwen3.ts";
import { StreamDecoder } from "../lib/tokens/stream_decoder.ts";

const tokenizer = await loadQwen3Tokenizer();
const sentence = "The quick brown fox — naïve café, 東京 😀 — jumps over the lazy dog. ";
let body = "";
while (tokenizer.encode(body).length < 4000) body += sentence;
const text = `<think>\n${body.slice(0, body.length / 2)}\n</think>\n\n${
  body.slice(body.length / 2)
}\n<tool_call>\n{"name": "add", "arguments": {"a": 1, "b": 2}}\n</tool_call>`;
const ids = Array.from(tokenizer.encode(text)).slice(0, 4096);

function run(mode: "parse" | "attribute" | "wire"): number {
  const decoder = new StreamDecoder(tokenizer);
  const parser = new OutputParser();
  const tokens = new PartTokens(tokenizer);
  let length = 0;
  let entries = 0;
  const take = (parts: OutputPart[]) => {
    if (mode !== "parse") tokens.attach(parts);
    if (mode === "wire") {
      for (const p of parts) {
        for (const t of p.logprobs ?? []) entries += openaiTokenLogprob(t).bytes ? 1 : 0;
      }
    }
  };
  const start = performance.now();
  for (const [i, id] of ids.entries()) {
    const piece = decoder.push(id);
    length += piece.length;
    if (mode !== "parse") tokens.add(id, -0.001 * i, length);
    if (piece) take(parser.push(piece));
  }
  take(parser.finish());
  const ns = (performance.now() - start) * 1e6 / ids.length;
  if (mode === "wire" && entries === 0) throw new Error("no entries built");
  return ns;
}

function median(mode: "parse" | "attribute" | "wire"): number {
  const runs = Array.from({ length: 9 }, () => run(mode)).sort((a, b) => a - b);
  return runs[4];
}

run("wire"); // warm-up
const parse = median("parse");
const attribute = median("attribute");
const wire = median("wire");
console.log(`tokens: ${ids.length}`);
console.log(`parse_ns_per_token: ${parse.toFixed(0)}`);
console.log(`parse_plus_attribution_ns_per_token: ${attribute.toFixed(0)}`);
console.log(`parse_attribution_and_wire_entries_ns_per_token: ${wire.toFixed(0)}`);
console.log(`attribution_overhead_ns_per_token: ${(attribute - parse).toFixed(0)}`);
console.log(`wire_entries_overhead_ns_per_token: ${(wire - attribute).toFixed(0)}`);
