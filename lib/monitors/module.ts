/**
 * Custom monitors from a module, so that they run where the built-ins do: on the checking thread
 * (`off_thread.ts`), each check under the time budget and stopped at it. A monitor passed as an
 * object runs on the gateway's thread, where a synchronous check cannot be stopped midway: one
 * that loops on an agent-written event holds every request. A module can be imported again on the
 * checking thread; a closure cannot cross to it.
 *
 * The module exports `monitors()`, returning the monitors (or a promise of them). It is imported
 * once here (to learn the names and refuse a broken module at start-up) and once on the checking
 * thread, so it must not depend on state of the importing thread.
 *
 * ```ts ignore
 * // my_monitors.ts
 * import type { Monitor } from "reins/lib/monitors/mod.ts";
 * export function monitors(): Monitor[] {
 *   return [{ name: "rm_rf", check: ({ events }) => ... }];
 * }
 * ```
 *
 * @module
 */
import { resolve } from "node:path";
import { pathToFileURL } from "node:url";
import { defaultMonitors } from "./defaults.ts";
import type { Monitor } from "./types.ts";

/** The module each monitor {@link loadMonitorModule} returned came from. */
const MODULE_OF = new WeakMap<Monitor, string>();

/** The URL of the module `monitor` was loaded from by {@link loadMonitorModule}, if any. */
export function monitorModuleOf(monitor: Monitor): string | undefined {
  return MODULE_OF.get(monitor);
}

/** A module specifier as a URL: URLs as they are, anything else a path from the working directory. */
function moduleUrl(specifier: string | URL): string {
  if (specifier instanceof URL) return specifier.href;
  return /^[a-z][a-z0-9+.-]*:/i.test(specifier) && !/^[a-z]:[\\/]/i.test(specifier)
    ? new URL(specifier).href
    : pathToFileURL(resolve(specifier)).href;
}

/**
 * The monitors of the module at `specifier` (a URL, or a path from the working directory),
 * checked and marked so that `offThreadMonitors` runs them on the checking thread. Errors name
 * the module: one that cannot be imported, has no `monitors()` export, returns something that
 * is not a list of monitors, or names two monitors alike or like a built-in one.
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * import { loadMonitorModule, monitorModuleOf } from "./module.ts";
 * const source = `export function monitors() {
 *   return [{ name: "shouting", check: ({ events }) =>
 *     events.some((e) => e.type === "log" && e.payload.text === e.payload.text.toUpperCase())
 *       ? [{ severity: "info", message: "shouting: a log line in capitals", evidence: [] }]
 *       : [] }];
 * }`;
 * const url = `data:text/javascript,${encodeURIComponent(source)}`;
 * const [monitor] = await loadMonitorModule(url);
 * assert.equal(monitor.name, "shouting");
 * assert.equal(monitorModuleOf(monitor), url);
 * await assert.rejects(
 *   loadMonitorModule(`data:text/javascript,${encodeURIComponent("export const x = 1;")}`),
 *   /expected it to export a function monitors\(\)/,
 * );
 * ```
 */
export async function loadMonitorModule(specifier: string | URL): Promise<Monitor[]> {
  const href = moduleUrl(specifier);
  const label = href.startsWith("data:") ? "a data: URL" : href;
  let exported: { monitors?: unknown };
  try {
    exported = await import(href);
  } catch (err) {
    throw new Error(
      `monitor module ${label}: could not be imported: ${
        err instanceof Error ? err.message.split("\n")[0] : String(err)
      }`,
    );
  }
  if (typeof exported.monitors !== "function") {
    throw new Error(
      `monitor module ${label}: expected it to export a function monitors() returning the ` +
        "monitors",
    );
  }
  const list: unknown = await exported.monitors();
  const builtIn = new Set(defaultMonitors().map((m) => m.name));
  const seen = new Set<string>();
  if (!Array.isArray(list)) {
    throw new Error(`monitor module ${label}: monitors() returned ${typeof list}, not a list`);
  }
  list.forEach((monitor: Partial<Monitor> | null, i) => {
    const name = monitor?.name;
    if (typeof name !== "string" || !/^[a-z][a-z0-9_]{0,63}$/.test(name)) {
      throw new Error(
        `monitor module ${label}: monitors()[${i}].name: expected a snake_case name of at ` +
          `most 64 characters, got ${JSON.stringify(name ?? null)}`,
      );
    }
    if (typeof monitor?.check !== "function") {
      throw new Error(`monitor module ${label}: monitors()[${i}].check: expected a function`);
    }
    if (builtIn.has(name)) {
      throw new Error(
        `monitor module ${label}: monitors()[${i}].name: '${name}' is a built-in monitor's name`,
      );
    }
    if (seen.has(name)) {
      throw new Error(
        `monitor module ${label}: monitors()[${i}].name: '${name}' is used twice`,
      );
    }
    seen.add(name);
  });
  for (const monitor of list as Monitor[]) MODULE_OF.set(monitor, href);
  return list as Monitor[];
}

/**
 * The monitors a CLI runs given its `--monitors-module` values: the built-ins, then each
 * module's (names unique across modules too); errors name the flag.
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * import { monitorsWithModules } from "./module.ts";
 * const builtIns = await monitorsWithModules([]);
 * assert.equal(builtIns.length, 7);
 * await assert.rejects(monitorsWithModules(["./no/such.ts"]), /^Error: --monitors-module: /);
 * ```
 */
export async function monitorsWithModules(modules: readonly string[]): Promise<Monitor[]> {
  const out = defaultMonitors();
  for (const specifier of modules) {
    let loaded: Monitor[];
    try {
      loaded = await loadMonitorModule(specifier);
    } catch (err) {
      throw new Error(`--monitors-module: ${err instanceof Error ? err.message : err}`);
    }
    for (const monitor of loaded) {
      if (out.some((m) => m.name === monitor.name)) {
        throw new Error(
          `--monitors-module: ${specifier}: monitor '${monitor.name}' is named by another module`,
        );
      }
      out.push(monitor);
    }
  }
  return out;
}
