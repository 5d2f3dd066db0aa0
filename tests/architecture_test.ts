/**
 * The layers of `lib/` are code, not a paragraph: every import of every `.ts` file under `lib/`
 * (and `mod.ts`) goes to its own layer or a lower one, and no chain of package imports comes
 * back to where it started. The table (tests/support/layers.ts) is printed, and drawn in
 * docs/architecture.md.
 */
import assert from "node:assert/strict";
import { fileURLToPath } from "node:url";
import {
  checkLayers,
  type ImportEdge,
  importSpecifiers,
  LAYERS,
  layerTable,
  packageOf,
  readImportEdges,
} from "./support/layers.ts";

const ROOT = fileURLToPath(new URL("../", import.meta.url));
const edges = await readImportEdges(ROOT);

Deno.test("lib/ follows the layer table: no wrong-way import, no package cycle", () => {
  console.log(layerTable(edges));
  const violations = checkLayers(edges);
  assert.deepEqual(violations.map((v) => v.message), []);
  const packages = new Set(edges.flatMap((e) => [packageOf(e.from), packageOf(e.to)]));
  console.log(
    `packages: ${packages.size - (packages.has(null) ? 1 : 0)}, imports: ${edges.length}`,
  );
});

Deno.test("the checker reads real imports: the stack composes gateway, proxy and UI", () => {
  // If the scanner missed imports, the table above would pass vacuously.
  const from = (file: string) => edges.filter((e) => e.from === file).map((e) => e.to);
  assert.ok(from("lib/stack/stack.ts").includes("lib/gateway/server.ts"));
  assert.ok(from("lib/stack/stack.ts").includes("lib/proxy/app.ts"));
  assert.ok(from("lib/stack/stack.ts").includes("lib/ui/app.ts"));
  // The controller CLI's dynamic import of the Kubernetes backend is a real edge too.
  assert.ok(edges.length > 500, `${edges.length} imports read`);
  // JSDoc examples are not imports: lib/ui/app.ts's example starts a gateway; that is no edge.
  assert.equal(from("lib/tokens/char.ts").some((to) => to.startsWith("lib/gateway/")), false);
});

Deno.test("a planted wrong-way import fails, naming the file, the target and both layers", () => {
  // The pure data model reaching up into the gateway: exactly what the table forbids.
  const planted: ImportEdge = { from: "lib/schema/core.ts", to: "lib/gateway/store.ts" };
  const violations = checkLayers([...edges, planted]);
  const wrong = violations.filter((v) => v.kind === "wrong_way");
  assert.equal(wrong.length, 1);
  assert.match(wrong[0].message, /lib\/schema\/core\.ts imports lib\/gateway\/store\.ts/);
  assert.match(wrong[0].message, /'schema' \(data model\) may not import 'gateway'/);
  // And it closes a cycle through everything that imports schema from above the gateway.
  assert.ok(violations.some((v) => v.kind === "cycle" && /schema -> gateway/.test(v.message)));
});

Deno.test("a planted import in source text is found by the scanner and fails the check", () => {
  const source = [
    "/** A pure helper. */",
    'import { z } from "zod";',
    'import type { Store } from "../gateway/store.ts";',
    "export const x = z.string();",
  ].join("\n");
  const from = "lib/algo/planted.ts";
  const planted = importSpecifiers(source)
    .filter((spec) => spec.startsWith("."))
    .map((spec) => ({ from, to: new URL(spec, `file:///${from}`).pathname.slice(1) }));
  assert.deepEqual(planted, [{ from, to: "lib/gateway/store.ts" }]);
  const [violation] = checkLayers([...edges, ...planted]);
  assert.equal(violation.kind, "wrong_way");
  assert.match(violation.message, /^lib\/algo\/planted\.ts imports lib\/gateway\/store\.ts/);
});

Deno.test("a cycle inside one layer fails, naming the packages around it", () => {
  const planted: ImportEdge[] = [
    { from: "lib/proxy/app.ts", to: "lib/monitors/types.ts" },
    { from: "lib/monitors/types.ts", to: "lib/proxy/app.ts" },
  ];
  const cycles = checkLayers(planted).filter((v) => v.kind === "cycle");
  assert.equal(cycles.length, 1);
  assert.match(
    cycles[0].message,
    /package cycle (monitors -> proxy -> monitors|proxy -> monitors -> proxy)/,
  );
});

Deno.test("a new package outside the table fails until it is placed in a layer", () => {
  const [violation] = checkLayers([{ from: "lib/newarea/x.ts", to: "lib/schema/core.ts" }]);
  assert.equal(violation.kind, "unknown_package");
  assert.match(violation.message, /package 'newarea' \(lib\/newarea\/x\.ts\) is in no layer/);
});

Deno.test("every package under lib/ is in exactly one layer", async () => {
  const onDisk: string[] = [];
  for await (const entry of Deno.readDir(`${ROOT}/lib`)) {
    const pkg = packageOf(`lib/${entry.name}`);
    if (pkg && (entry.isDirectory || entry.name.endsWith(".ts"))) onDisk.push(pkg);
  }
  const placed = LAYERS.flatMap(([, packages]) => packages);
  assert.equal(new Set(placed).size, placed.length, "no package in two layers");
  for (const pkg of onDisk) assert.ok(placed.includes(pkg), `lib/${pkg} is in a layer`);
});
