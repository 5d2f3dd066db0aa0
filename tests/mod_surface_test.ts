/**
 * The library surface: `mod.ts` re-exports the whole API, and each area is an entry point of
 * its own (deno.json `exports`, e.g. `@reins/reins/samples`) with `@module` documentation.
 * Every value a sub-module exports is the same binding in `mod.ts`, and `mod.ts` exports
 * nothing that no entry point has.
 */
import assert from "node:assert/strict";
import * as reins from "../mod.ts";

const ROOT = new URL("../", import.meta.url);
const config = JSON.parse(await Deno.readTextFile(new URL("deno.json", ROOT)));
const entries = Object.entries(config.exports as Record<string, string>);

Deno.test("deno.json names one entry point per area, each documented with @module", async () => {
  assert.equal(config.exports["."], "./mod.ts");
  for (const name of ["./schema", "./samples", "./algo", "./gateway", "./loop", "./ui"]) {
    assert.ok(name in config.exports, `${name} is an entry point`);
  }
  for (const [name, path] of entries) {
    const text = await Deno.readTextFile(new URL(path, ROOT));
    assert.match(text, /^\/\*\*[\s\S]*?@module[\s\S]*?\*\//, `${name} (${path}) has @module docs`);
  }
});

Deno.test("mod.ts keeps the whole API: the union of the entry points, same bindings", async () => {
  const union = new Set<string>();
  for (const [name, path] of entries) {
    // k8s and engine stay out of mod.ts (a heavy client; node-llama-cpp's native binding)
    if (name === "." || name === "./k8s" || name === "./engine") continue;
    const mod = await import(new URL(path, ROOT).href);
    const names = Object.keys(mod);
    assert.ok(names.length > 0, `${name} exports something`);
    for (const key of names) {
      union.add(key);
      assert.ok(key in reins, `${name}: ${key} is exported by mod.ts`);
      assert.equal(
        (reins as Record<string, unknown>)[key],
        mod[key],
        `${name}: ${key} is the same binding`,
      );
    }
  }
  const extra = Object.keys(reins).filter((k) => !union.has(k));
  assert.deepEqual(extra, [], "mod.ts exports nothing outside the entry points");
  console.log(`mod_runtime_exports: ${Object.keys(reins).length}`);
  console.log(`entry_points: ${entries.length - 1}`);
});
