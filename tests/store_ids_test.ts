/**
 * The store's id check: its fast path (a regex test) accepts exactly what `IdSchema` accepts,
 * and whatever it refuses is named by field with the schema's message.
 */
import assert from "node:assert/strict";
import { checkId, isId } from "../lib/gateway/store_input.ts";
import { IdSchema, MAX_ID_CHARS, ValidationError } from "../lib/schema.ts";
import { mulberry32 } from "../lib/util/random.ts";

const ALPHABET = [..."aZ09._:@-", " ", "/", "\\", "\u0000", "é", "😀", "?", "#", "%"];

function randomId(random: () => number): string {
  const length = random() < 0.05
    ? MAX_ID_CHARS + Math.floor(random() * 3) - 1
    : Math.floor(random() * 12);
  let id = "";
  // Mostly id characters, so that valid and invalid ids both come up often.
  for (let i = 0; i < length; i++) {
    id += random() < 0.9
      ? ALPHABET[Math.floor(random() * 9)]
      : ALPHABET[Math.floor(random() * ALPHABET.length)];
  }
  return id;
}

Deno.test("checkId and isId accept exactly what IdSchema accepts (20,000 seeded ids and the edges)", () => {
  const random = mulberry32(29);
  const ids: unknown[] = [
    "",
    ".",
    "..",
    "...",
    "a".repeat(MAX_ID_CHARS),
    "a".repeat(MAX_ID_CHARS + 1),
    "r-1\n",
    42,
    null,
    undefined,
    ["r1"],
  ];
  for (let i = 0; i < 20_000; i++) ids.push(randomId(random));
  let valid = 0;
  for (const id of ids) {
    const expected = IdSchema.safeParse(id);
    assert.equal(isId(id), expected.success, `isId(${JSON.stringify(id)})`);
    if (expected.success) {
      valid++;
      checkId("rollout_id", id);
      continue;
    }
    assert.throws(
      () => checkId("rollout_id", id),
      (error: unknown) =>
        error instanceof ValidationError && error.field === "rollout_id" &&
        error.message.includes(expected.error.issues[0].message),
      `checkId accepted ${JSON.stringify(id)}`,
    );
  }
  // Both sides were exercised.
  assert.ok(valid > 2_000 && valid < ids.length - 2_000, `valid ${valid} of ${ids.length}`);
});
