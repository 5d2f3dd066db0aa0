/**
 * `max_prompt_bytes` (issue #29): a prompt is refused when its messages and tools, as JSON in
 * UTF-8, pass the limit, and only then. Prompts well under the limit are let through on a bound
 * from above, without being stringified; this checks that bound against the exact count on
 * random prompts whose strings hold what JSON escapes longest (control characters, quotes,
 * backslashes, lone surrogates) and numbers at their longest.
 */
import assert from "node:assert/strict";
import { checkPromptBytes } from "../lib/proxy/prepare.ts";
import { HttpError } from "../lib/util/error.ts";
import { mulberry32 } from "../lib/util/random.ts";

type Ctx = Parameters<typeof checkPromptBytes>[0];
type Request = Parameters<typeof checkPromptBytes>[1];

const CHARS = ["a", " ", "é", "😀", "\u0001", "\n", '"', "\\", "\ud800", "中"];
const NUMBERS = [0, -1.2345678901234567e-308, 1e21, -123456789012345680000, 0.1, NaN, Infinity];

function randomValue(rand: () => number, depth: number): unknown {
  const pick = <T>(items: T[]) => items[Math.floor(rand() * items.length)];
  const kind = depth > 3 ? Math.floor(rand() * 4) : Math.floor(rand() * 6);
  if (kind === 0) {
    return Array.from({ length: Math.floor(rand() * 40) }, () => pick(CHARS)).join("");
  }
  if (kind === 1) return pick(NUMBERS);
  if (kind === 2) return pick([true, false, null]);
  if (kind === 3) return undefined; // left out of objects, null in arrays
  if (kind === 4) {
    return Array.from({ length: Math.floor(rand() * 5) }, () => randomValue(rand, depth + 1));
  }
  const out: Record<string, unknown> = {};
  for (let i = Math.floor(rand() * 5); i > 0; i--) {
    out[randomValue(rand, 9) as string ?? "k"] = randomValue(rand, depth + 1);
  }
  return out;
}

const exactBytes = (request: Request) =>
  new TextEncoder().encode(
    JSON.stringify(request.messages) +
      (request.tools.length ? JSON.stringify(request.tools) : ""),
  ).length;

Deno.test("max_prompt_bytes: refused exactly when the prompt's JSON passes the limit (random prompts, random limits)", () => {
  const rand = mulberry32(29);
  let fastAccepts = 0;
  for (let n = 0; n < 3_000; n++) {
    // Every third prompt is mostly what the bound counts at its longest, so that a bound that
    // is short anywhere lets some prompt over the limit through.
    const k = 50 + Math.floor(rand() * 500);
    const tight = n % 3 === 0
      ? ["\u0001".repeat(k), Array(k).fill(-1.2345678901234567e-308)][n % 2]
      : null;
    const messages = Array.from({ length: 1 + Math.floor(rand() * 4) }, () => ({
      role: "user",
      content: tight ?? randomValue(rand, 9) ?? "",
      extra: tight ? null : randomValue(rand, 0),
    }));
    const tools = rand() < 0.5 ? [] : [randomValue(rand, 1)];
    const request = { messages, tools } as unknown as Request;
    const exact = exactBytes(request);
    // Limits from just under the exact size to past the bound from above (6 bytes a unit).
    const max = Math.max(1, Math.floor(rand() * 8 * exact) + (n % 7 === 0 ? exact - 1 : 0));
    const ctx = { options: { max_prompt_bytes: max } } as unknown as Ctx;
    let refused: HttpError | null = null;
    try {
      checkPromptBytes(ctx, request);
    } catch (err) {
      if (!(err instanceof HttpError)) throw err;
      refused = err;
    }
    assert.equal(refused !== null, exact > max, `exact ${exact}, limit ${max}`);
    if (refused) {
      assert.equal(refused.status, 413);
      assert.match(refused.message, /^messages: the prompt is (at least )?\d+ bytes/);
    } else if (max >= 7 * exact) fastAccepts++;
  }
  assert.ok(fastAccepts > 100, `the bound from above let ${fastAccepts} prompts through`);
});

Deno.test("max_prompt_bytes: a value JSON.stringify would rewrite (toJSON) is counted exactly", () => {
  const grows = { toJSON: () => "x".repeat(1_000) };
  const request = { messages: [{ role: "user", content: grows }], tools: [] };
  const ctx = { options: { max_prompt_bytes: 500 } } as unknown as Ctx;
  assert.throws(
    () => checkPromptBytes(ctx, request as unknown as Request),
    /messages: the prompt is 1030 bytes, more than max_prompt_bytes \(500\)/,
  );
});
