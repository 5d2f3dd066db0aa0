/**
 * The one JSONL reader (lib/schema/jsonl.ts): every line checked against its schema, the bad
 * line named by its real line number, and, in the lenient read a live file needs, the good
 * lines kept beside the refusals.
 */
import assert from "node:assert/strict";
import { z } from "zod";
import { parseJsonl, parseJsonlLines, ValidationError } from "../lib/schema.ts";

const Row = z.strictObject({ step: z.number().int(), reward: z.number() });

Deno.test("a bad line is refused naming the file and its line (blank lines counted)", () => {
  const text = '{"step":1,"reward":0.5}\n\n{"step":2,"reward":"high"}\n';
  assert.throws(() => parseJsonl(text, Row, (line) => `m.jsonl:${line}`), (e: unknown) => {
    assert.ok(e instanceof ValidationError);
    assert.equal(e.field, "m.jsonl:3.reward");
    return true;
  });
  assert.throws(() => parseJsonl('{"step":1,"reward":1}\n{"step":', Row), {
    field: "line 2",
    message: /line 2: not JSON/,
  });
  assert.throws(() => parseJsonl('{"step":1,"reward":1,"extra":0}', Row), {
    field: "line 1.extra",
  });
});

Deno.test("the lenient read keeps every good line and says why each other one was refused", () => {
  const lines = parseJsonlLines('{"step":1,"reward":1}\nnope\n{"step":3,"reward":0}\n', Row);
  assert.deepEqual(lines.map((l) => l.line), [1, 2, 3]);
  assert.deepEqual(lines.flatMap((l) => "value" in l ? [l.value.step] : []), [1, 3]);
  const bad = lines.find((l) => "error" in l);
  assert.ok(bad && "error" in bad && /line 2: not JSON/.test(bad.error.message));
  assert.deepEqual(parseJsonl("", Row), []);
});
