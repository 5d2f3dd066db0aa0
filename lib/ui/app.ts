/**
 * The Live UI as a Hono app the gateway mounts at `/ui`: server-rendered pages (overview,
 * rollouts, rollout detail, a step's drill-down, runs, metrics, proxy), HTML fragments the
 * client script swaps in live, a change feed for the browser (`/api/stream`,
 * cookie-authenticated because `EventSource` cannot send headers), JSON data endpoints and the
 * exports. Everything but the login form needs the gateway's admin key. Optionally runs the
 * monitors on every finished rollout. The routes live in `routes/`, one sub-app per resource;
 * this module composes them around the shared state (`UiDeps`).
 *
 * @module
 */
import { Hono } from "hono";
import type { Context } from "hono";
import { secureHeaders } from "hono/secure-headers";
import type { Mount, MountContext } from "../gateway/server.ts";
import type { Store } from "../gateway/store.ts";
import { toHttpError } from "../util/error.ts";
import { defaultMonitors } from "../monitors/defaults.ts";
import { type MonitorRunner, startMonitorRunner } from "../monitors/runner.ts";
import { type PhaseSnapshot, ValidationError } from "../schema.ts";
import { requireUiAccess, UiSessions } from "./auth.ts";
import { RolloutText } from "./query.ts";
import { RunIndex } from "./run_index.ts";
import { detectRunTokenizer, type RunTokenizer } from "./run_tokenizer.ts";
import { type RunInfo, runsInDirectory, runsInGateway } from "./runs.ts";
import type { UiDeps, UiOptions } from "./routes/deps.ts";
import { liveRoutes } from "./routes/live.ts";
import { overviewRoutes } from "./routes/overview.ts";
import { rolloutRoutes } from "./routes/rollouts.ts";
import { runRoutes } from "./routes/runs.ts";
import { errorPage, sessionRoutes } from "./routes/session.ts";
import { stepRoutes } from "./routes/steps.ts";

export type { UiOptions };

/** What the UI app reads: the gateway's store and phase gate, and its keys. */
export interface UiContext {
  store: Store;
  adminKey: string;
  secret: string;
  phase?: { snapshot(): PhaseSnapshot };
  /** Ends open streams when aborted (e.g. the gateway shutting down). */
  signal?: AbortSignal;
}

/** A UI instance: mount it on a gateway, close it before (or with) the gateway. */
export interface Ui {
  /** Pass in `startGateway({ mounts: [ui.mount] })`. */
  readonly mount: Mount;
  /** The running index and monitor runner, once mounted. */
  readonly index: RunIndex | null;
  readonly monitors: MonitorRunner | null;
  /** The tokenizer the pages decode with (see {@link UiApp.tokenizer}), once mounted. */
  tokenizer(): Promise<RunTokenizer | null>;
  /** Ends live streams and background loops. Idempotent. */
  close(): Promise<void>;
}

/** A built UI app with its background work. */
export interface UiApp {
  app: Hono;
  index: RunIndex;
  monitors: MonitorRunner | null;
  /** The tokenizer pages decode with, and which rule chose it (`"auto"`: read from the run). */
  tokenizer(): Promise<RunTokenizer>;
  close(): Promise<void>;
}

/**
 * Creates the UI for `startGateway`'s `mounts`. Close the UI before the gateway: open
 * `/api/stream` responses would otherwise keep the server's shutdown waiting.
 *
 * @example
 * ```ts
 * import { startGateway } from "../gateway/server.ts";
 * import { loadCharTokenizer } from "../tokens/char.ts";
 * import { createUi } from "./app.ts";
 * const ui = createUi({ tokenizer: await loadCharTokenizer() });
 * const gw = await startGateway({ mounts: [ui.mount] });
 * console.log(`${gw.url}/ui/ (log in with the admin key)`);
 * await ui.close();
 * await gw.close();
 * ```
 */
export function createUi(options: UiOptions = {}): Ui {
  const base = normalizeBase(options.base ?? "/ui");
  const built: UiApp[] = [];
  let closed = false;
  return {
    mount: {
      path: base,
      create: (context: MountContext) => {
        if (closed) throw new Error("ui: already closed");
        const signal = (context as MountContext & { signal?: AbortSignal }).signal;
        const ui = createUiApp({
          store: context.store,
          adminKey: context.adminKey,
          secret: context.secret,
          phase: context.phase,
          ...(signal ? { signal } : {}),
        }, { ...options, base });
        built.push(ui);
        return ui.app;
      },
    },
    get index() {
      return built[0]?.index ?? null;
    },
    get monitors() {
      return built[0]?.monitors ?? null;
    },
    tokenizer() {
      return built[0]?.tokenizer() ?? Promise.resolve(null);
    },
    async close() {
      closed = true;
      await Promise.all(built.map((b) => b.close()));
    },
  };
}

function normalizeBase(base: string): string {
  if (!/^\/[A-Za-z0-9._~\/-]*$/.test(base)) {
    throw new ValidationError("base", [
      `base: expected a path like "/ui", got ${JSON.stringify(base)}`,
    ]);
  }
  return base.replace(/\/+$/, "");
}

/**
 * Builds the UI app over a store (what {@link createUi} mounts; usable alone, e.g. with
 * `app.request()` in tests or behind another server). It composes one Hono sub-app per
 * resource (session, overview, rollouts, drill-down, runs and metrics, proxy and stream),
 * each validating its own query with zod before its handler runs.
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * import { openSqliteStore } from "../gateway/sqlite_store.ts";
 * import { createUiApp } from "./app.ts";
 * const store = openSqliteStore(":memory:");
 * const ui = createUiApp({ store, adminKey: "admin-key", secret: "s" }, { monitors: false });
 * const res = await ui.app.request("/rollouts", { headers: { authorization: "Bearer admin-key" } });
 * assert.equal(res.status, 200);
 * await res.body?.cancel();
 * await ui.close();
 * await store.close();
 * ```
 */
export function createUiApp(context: UiContext, options: UiOptions = {}): UiApp {
  const { store } = context;
  const base = normalizeBase(options.base ?? "/ui");
  const keys = { adminKey: context.adminKey, secret: context.secret };
  const index = new RunIndex(store);
  const indexPollMs = options.indexPollMs ?? 500;
  const closing = new AbortController();
  const onContextAbort = () => closing.abort();
  context.signal?.addEventListener("abort", onContextAbort, { once: true });
  const monitorList = options.monitors === false ? [] : options.monitors ?? defaultMonitors();
  const monitors = monitorList.length
    ? startMonitorRunner({
      store,
      monitors: monitorList,
      ...(options.auditor ? { auditor: options.auditor } : {}),
    })
    : null;
  const sessions = new UiSessions(
    options.sessionTtlMs === undefined ? {} : { ttlMs: options.sessionTtlMs },
  );

  // Follow the change feed in the background so that pages rarely wait for it.
  let indexTimer: ReturnType<typeof setTimeout> | undefined;
  let indexLoop: Promise<void> = Promise.resolve();
  const scheduleIndex = () => {
    if (closing.signal.aborted) return;
    indexTimer = setTimeout(() => {
      indexLoop = index.refresh(1_000).then(
        () => {},
        (err) => {
          if (!closing.signal.aborted) {
            console.error("ui: index refresh failed:", err instanceof Error ? err.message : err);
          }
        },
      ).finally(scheduleIndex);
    }, indexPollMs);
  };
  scheduleIndex();

  let tokenizer: Promise<RunTokenizer> | null = null;
  const deps: UiDeps = {
    store,
    base,
    index,
    options,
    texts: new RolloutText(store),
    closing: closing.signal,
    phaseSnapshot: () => context.phase?.snapshot() ?? null,
    pageContext: async () => ({ base, seq: await store.lastSeq() }),
    tokenizer: () => {
      const given = options.tokenizer;
      if (typeof given === "object") {
        return Promise.resolve({ tokenizer: given, name: given.name, reason: "given" });
      }
      if (given === undefined) {
        return Promise.resolve({ tokenizer: null, name: "none", reason: "none given" });
      }
      tokenizer ??=
        (typeof given === "function"
          ? given().then((t): RunTokenizer => ({ tokenizer: t, name: t.name, reason: "given" }))
          : detectRunTokenizer({ runDir: options.runDir ?? null, store })).catch((err) => {
            tokenizer = null;
            throw err;
          });
      return tokenizer;
    },
    runs: async () => {
      await index.refresh(2_000);
      const runs: RunInfo[] = [
        ...(options.runsDir ? await runsInDirectory(options.runsDir) : []),
        ...await runsInGateway(store, index),
      ];
      return runs;
    },
  };

  const app = new Hono();
  app.use(
    "*",
    secureHeaders({
      strictTransportSecurity: false,
      contentSecurityPolicy: {
        defaultSrc: ["'self'"],
        scriptSrc: ["'self'"],
        styleSrc: ["'self'", "'unsafe-inline'"],
        imgSrc: ["'self'", "data:"],
        connectSrc: ["'self'"],
        frameAncestors: ["'none'"],
        baseUri: ["'none'"],
        formAction: ["'self'"],
      },
    }),
  );
  app.use("*", async (c, next) => {
    await next();
    c.res.headers.set("cache-control", "no-store");
  });
  const fail = (c: Context, status: number, code: string, message: string) => {
    const path = new URL(c.req.url).pathname;
    const wantsJson = path.includes("/api/") || path.endsWith(".json") ||
      path.endsWith(".ipynb") || path.includes("/fragments/");
    if (wantsJson) return c.json({ error: { code, message } }, status as 400);
    return c.html(errorPage(base, status, message).toString(), status as 400);
  };
  app.onError((err, c) => {
    const error = toHttpError("ui", err, c.req.raw);
    return fail(c, error.status, error.code, error.message);
  });

  app.route("/", sessionRoutes(base, keys, sessions));
  app.use("*", requireUiAccess(keys, sessions));
  const overview = overviewRoutes(deps);
  app.route("/", overview.app);
  app.route("/", rolloutRoutes(deps));
  app.route("/", stepRoutes(deps));
  app.route("/", runRoutes(deps));
  app.route("/", liveRoutes(deps));

  // Mounted sub-apps do not match `<base>/`; a catch-all serves it (and UI-style 404s).
  app.get("*", (c) => {
    const path = new URL(c.req.url).pathname;
    if (path === `${base}/`) return overview.overviewPage(c);
    return fail(c, 404, "not_found", `path: no UI page ${path}`);
  });

  let closedOnce: Promise<void> | null = null;
  return {
    app,
    index,
    monitors,
    tokenizer: deps.tokenizer,
    close() {
      closedOnce ??= (async () => {
        closing.abort();
        context.signal?.removeEventListener("abort", onContextAbort);
        clearTimeout(indexTimer);
        await indexLoop;
        clearTimeout(indexTimer);
        await monitors?.close();
      })();
      return closedOnce;
    },
  };
}
