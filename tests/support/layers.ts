/**
 * The layer table of `lib/` and the checker that enforces it (run by
 * `tests/architecture_test.ts`; the same table is drawn in `docs/architecture.md`).
 *
 * A package is a directory under `lib/` (`lib/gateway/…` → `gateway`) or a single file there
 * (`lib/flags.ts` → `flags`, `lib/schema.ts` → `schema`, one package with `lib/schema/`); the
 * root `mod.ts` is the package `mod`. A package may import its own layer or any layer below it,
 * never one above; and no chain of package imports may come back to where it started (a cycle
 * inside one layer is as bad as a wrong-way edge).
 *
 * Imports are read by {@link importSpecifiers}, a small scanner written here because no
 * reachable package parses TypeScript imports without type-checking the program: it skips
 * comments (so JSDoc examples do not count), string and template literal contents and regular
 * expression literals, and finds `import … from "x"`, `export … from "x"`, `import "x"` and
 * `import("x")`.
 *
 * @module
 */
import { dirname, join, relative, resolve } from "node:path";

/** The layers, bottom first. A package may import its own layer and the ones below. */
export const LAYERS: readonly (readonly [name: string, packages: readonly string[]])[] = [
  ["utilities (no reins imports)", ["util", "flags"]],
  ["data model", ["schema"]],
  ["pure core and HTTP plumbing", [
    "tokens",
    "samples",
    "algo",
    "batching",
    "trajectories",
    "plot",
    "http",
  ]],
  ["stored state", ["gateway"]],
  ["services over the store", ["proxy", "monitors", "controller", "trainer"]],
  ["services over services", ["ui", "harness", "engine"]],
  ["composition root", ["stack"]],
  ["orchestration", ["loop", "curation"]],
  ["public surface", ["mod"]],
];

/** One import between two files of the tree. */
export interface ImportEdge {
  /** Repository-relative paths, e.g. `lib/proxy/app.ts`. */
  from: string;
  to: string;
}

/** What the checker found wrong. */
export interface LayerViolation {
  kind: "wrong_way" | "cycle" | "unknown_package";
  message: string;
}

/**
 * The package of a repository-relative path (`null` outside `lib/` and `mod.ts`).
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * import { packageOf } from "./layers.ts";
 * assert.equal(packageOf("lib/proxy/codecs/openai_chat.ts"), "proxy");
 * assert.equal(packageOf("lib/schema.ts"), "schema");
 * assert.equal(packageOf("mod.ts"), "mod");
 * assert.equal(packageOf("tests/x_test.ts"), null);
 * ```
 */
export function packageOf(path: string): string | null {
  if (path === "mod.ts") return "mod";
  const parts = path.split("/");
  if (parts[0] !== "lib" || parts.length < 2) return null;
  return parts.length === 2 ? parts[1].replace(/\.ts$/, "") : parts[1];
}

/** The layer index of a package (`-1` when the table does not know it). */
export function layerOf(pkg: string): number {
  return LAYERS.findIndex(([, packages]) => packages.includes(pkg));
}

/**
 * The module specifiers a TypeScript source imports or re-exports, statically or dynamically
 * (string-literal dynamic imports only), ignoring comments and literal contents.
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * import { importSpecifiers } from "./layers.ts";
 * const source = [
 *   'import { a } from "./a.ts";',
 *   "/** @example import { b } from \"./b.ts\"; *" + "/",
 *   'export * from "./c.ts";',
 *   'const text = `import x from "./d.ts"`;',
 *   'const re = /"\\/\\//; const k = await import("./e.ts");',
 * ].join("\n");
 * assert.deepEqual(importSpecifiers(source), ["./a.ts", "./c.ts", "./e.ts"]);
 * ```
 */
export function importSpecifiers(source: string): string[] {
  // Mask comments, template text and regex literals with spaces; keep string literals whole
  // (specifiers are string literals), so the import grammar can be matched on what is left.
  let out = "";
  let i = 0;
  const n = source.length;
  const templateDepth: number[] = []; // brace depth at which each open `${` resumes a template
  let braces = 0;
  let lastSignificant = "";
  const regexAllowedAfter = new Set([
    "",
    "(",
    ",",
    "=",
    ":",
    "[",
    "!",
    "&",
    "|",
    "?",
    "{",
    "}",
    ";",
  ]);
  const keywordBeforeRegex = /(?:^|[^\w$])(?:return|typeof|case|do|else|in|of|void|yield|await)$/;
  const skipTemplate = () => {
    // At the character after "`" (or after the "}" closing a substitution): masks text until
    // the closing "`" or the next "${".
    while (i < n) {
      const c = source[i];
      if (c === "\\") {
        out += "  ";
        i += 2;
      } else if (c === "`") {
        out += "`";
        i++;
        lastSignificant = "`";
        return;
      } else if (c === "$" && source[i + 1] === "{") {
        out += "${";
        i += 2;
        templateDepth.push(braces);
        braces++;
        lastSignificant = "{";
        return;
      } else {
        out += c === "\n" ? "\n" : " ";
        i++;
      }
    }
  };
  while (i < n) {
    const c = source[i];
    const next = source[i + 1];
    if (c === "/" && next === "/") {
      while (i < n && source[i] !== "\n") {
        out += " ";
        i++;
      }
    } else if (c === "/" && next === "*") {
      const end = source.indexOf("*/", i + 2);
      const stop = end < 0 ? n : end + 2;
      out += source.slice(i, stop).replace(/[^\n]/g, " ");
      i = stop;
    } else if (c === '"' || c === "'") {
      let j = i + 1;
      while (j < n && source[j] !== c && source[j] !== "\n") j += source[j] === "\\" ? 2 : 1;
      out += source.slice(i, j + 1);
      i = j + 1;
      lastSignificant = c;
    } else if (c === "`") {
      out += "`";
      i++;
      skipTemplate();
    } else if (c === "/") {
      const before = out.trimEnd();
      if (regexAllowedAfter.has(lastSignificant) || keywordBeforeRegex.test(before)) {
        let j = i + 1;
        let inClass = false;
        while (j < n && source[j] !== "\n") {
          const d = source[j];
          if (d === "\\") j += 2;
          else if (d === "[") (inClass = true), j++;
          else if (d === "]") (inClass = false), j++;
          else if (d === "/" && !inClass) break;
          else j++;
        }
        out += " ".repeat(j + 1 - i);
        i = j + 1;
        lastSignificant = ")";
      } else {
        out += c;
        i++;
        lastSignificant = c;
      }
    } else {
      if (c === "{") braces++;
      if (c === "}") {
        braces--;
        if (templateDepth.length && templateDepth[templateDepth.length - 1] === braces) {
          templateDepth.pop();
          out += "}";
          i++;
          skipTemplate();
          continue;
        }
      }
      out += c;
      i++;
      if (!/\s/.test(c)) lastSignificant = /[\w$]/.test(c) ? "a" : c;
    }
  }
  const found: { at: number; spec: string }[] = [];
  const statement =
    /(?:^|[;\n}])\s*(?:import|export)(?:\s+type)?\s*(?:[\w$*{},\s]+?\s*from\s*)?(["'])([^"'\n]+)\1/g;
  for (const m of out.matchAll(statement)) found.push({ at: m.index, spec: m[2] });
  for (const m of out.matchAll(/\bimport\s*\(\s*(["'])([^"'\n]+)\1\s*[,)]/g)) {
    found.push({ at: m.index, spec: m[2] });
  }
  return found.sort((a, b) => a.at - b.at).map((f) => f.spec);
}

/**
 * Reads every `.ts` file under `lib/` and `mod.ts` of the tree at `root` and returns the
 * imports between them (relative specifiers resolved; package and `node:` imports skipped).
 */
export async function readImportEdges(root: string): Promise<ImportEdge[]> {
  const files = ["mod.ts"];
  const walk = async (dir: string) => {
    for await (const entry of Deno.readDir(join(root, dir))) {
      const path = `${dir}/${entry.name}`;
      if (entry.isDirectory) await walk(path);
      else if (entry.name.endsWith(".ts")) files.push(path);
    }
  };
  await walk("lib");
  const edges: ImportEdge[] = [];
  for (const from of files.sort()) {
    const source = await Deno.readTextFile(join(root, from));
    for (const spec of importSpecifiers(source)) {
      if (!spec.startsWith(".")) continue;
      const to = relative(root, resolve(root, dirname(from), spec));
      edges.push({ from, to });
    }
  }
  return edges;
}

/**
 * Checks the edges against {@link LAYERS}: every import between two packages goes to the same
 * or a lower layer, every package is in the table, and the package graph has no cycle.
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * import { checkLayers } from "./layers.ts";
 * assert.deepEqual(checkLayers([{ from: "lib/proxy/app.ts", to: "lib/gateway/store.ts" }]), []);
 * const [wrong] = checkLayers([{ from: "lib/schema/core.ts", to: "lib/http/body.ts" }]);
 * assert.equal(wrong.kind, "wrong_way");
 * ```
 */
export function checkLayers(edges: readonly ImportEdge[]): LayerViolation[] {
  const violations: LayerViolation[] = [];
  const graph = new Map<string, Map<string, ImportEdge>>();
  const unknown = new Set<string>();
  for (const edge of edges) {
    const a = packageOf(edge.from);
    const b = packageOf(edge.to);
    if (a === null || b === null) continue;
    for (const pkg of [a, b]) {
      if (layerOf(pkg) < 0 && !unknown.has(pkg)) {
        unknown.add(pkg);
        violations.push({
          kind: "unknown_package",
          message: `package '${pkg}' (${pkg === a ? edge.from : edge.to}) is in no layer: ` +
            "add it to LAYERS in tests/support/layers.ts and to docs/architecture.md",
        });
      }
    }
    if (a === b) continue;
    if (!graph.has(a)) graph.set(a, new Map());
    if (!graph.get(a)!.has(b)) graph.get(a)!.set(b, edge);
    const la = layerOf(a);
    const lb = layerOf(b);
    if (la >= 0 && lb > la) {
      violations.push({
        kind: "wrong_way",
        message: `${edge.from} imports ${edge.to}: '${a}' (${LAYERS[la][0]}) may not import ` +
          `'${b}' (${LAYERS[lb][0]}, a higher layer)`,
      });
    }
  }
  // Cycles: a depth-first search over packages; each back edge closes one.
  const state = new Map<string, "open" | "done">();
  const stack: string[] = [];
  const visit = (pkg: string) => {
    state.set(pkg, "open");
    stack.push(pkg);
    for (const [next, edge] of graph.get(pkg) ?? []) {
      if (state.get(next) === "open") {
        const loop = [...stack.slice(stack.indexOf(next)), next];
        violations.push({
          kind: "cycle",
          message: `package cycle ${loop.join(" -> ")} (closed by ${edge.from} -> ${edge.to})`,
        });
      } else if (!state.has(next)) visit(next);
    }
    stack.pop();
    state.set(pkg, "done");
  };
  for (const pkg of [...graph.keys()].sort()) if (!state.has(pkg)) visit(pkg);
  return violations;
}

/** The layer table as text, top layer first, with each package's imports of other packages. */
export function layerTable(edges: readonly ImportEdge[]): string {
  const uses = new Map<string, Set<string>>();
  for (const edge of edges) {
    const a = packageOf(edge.from);
    const b = packageOf(edge.to);
    if (a === null || b === null || a === b) continue;
    if (!uses.has(a)) uses.set(a, new Set());
    uses.get(a)!.add(b);
  }
  const lines: string[] = [];
  LAYERS.map((layer, index) => ({ layer, index })).reverse().forEach(({ layer, index }) => {
    lines.push(`${index} ${layer[0]}`);
    for (const pkg of layer[1]) {
      lines.push(`    ${pkg.padEnd(13)}-> ${[...(uses.get(pkg) ?? [])].sort().join(", ") || "-"}`);
    }
  });
  return lines.join("\n");
}
