/**
 * The Live UI as a Hono app the gateway mounts at `/ui`: server-rendered pages (overview,
 * rollouts, rollout detail, proxy), HTML fragments the client script swaps in live, a change
 * feed for the browser (`/api/stream`, cookie-authenticated because `EventSource` cannot send
 * headers), JSON data endpoints and the rollout export. Everything but the login form needs
 * the gateway's admin key. Optionally runs the monitors on every finished rollout.
 *
 * @module
 */
import { Hono } from "hono";
import type { Context } from "hono";
import { deleteCookie, getCookie, setCookie } from "hono/cookie";
import { secureHeaders } from "hono/secure-headers";
import { changeFeedResponse } from "../gateway/change_feed.ts";
import type { Mount, MountContext } from "../gateway/server.ts";
import type { Store } from "../gateway/store.ts";
import { bodyLimits } from "../http/body.ts";
import { HttpError, toHttpError } from "../util/error.ts";
import { sleep } from "../util/time.ts";
import type { Auditor } from "../monitors/auditor.ts";
import { defaultMonitors } from "../monitors/defaults.ts";
import { type MonitorRunner, startMonitorRunner } from "../monitors/runner.ts";
import type { Monitor } from "../monitors/types.ts";
import {
  type MergeStrategy,
  MergeStrategySchema,
  parseOrThrow,
  type PhaseSnapshot,
  ValidationError,
} from "../schema.ts";
import { RolloutListQuerySchema } from "../schema/ui.ts";
import type { ChatTokenizer } from "../tokens/types.ts";
import { checkAccess, requireUiAccess, SESSION_COOKIE, UiSessions } from "./auth.ts";
import { detailFragment } from "./detail.ts";
import { exportRollout, rolloutNotebook } from "./export.ts";
import { html, type SafeHtml } from "./html.ts";
import { liveRegion, page, type PageContext } from "./layout.ts";
import {
  type EvalPoint,
  loadEvalPoints,
  overviewFragment,
  overviewView,
  viewQuery,
} from "./overview.ts";
import { type CallFact, proxyFragment } from "./proxy_view.ts";
import { listRolloutPage, RolloutText } from "./query.ts";
import { filterForm, queryString, rolloutTable } from "./rollouts_view.ts";
import { RunIndex } from "./run_index.ts";
import { runsFragment, runsInDirectory, runsInGateway, runsView } from "./runs.ts";
import { APP_CSS, APP_JS } from "./static.ts";

/** Options of {@link createUi}. */
export interface UiOptions {
  /** Path the UI is mounted at (default `/ui`). */
  base?: string;
  /** Decodes token ids on the detail page (without one, ids are shown). */
  tokenizer?: ChatTokenizer;
  /** A metrics JSONL file of {@link TrainStepMetrics} lines, re-read on each overview render. */
  metricsPath?: string;
  /**
   * A directory of runs (each subdirectory, up to two levels down, holding a `metrics.jsonl`,
   * e.g. `runs/` or `experiments/results/`), listed on the runs page with this gateway's runs.
   */
  runsDir?: string;
  /** Monitors run on each finished rollout (default: the built-in ones; `false`: none). */
  monitors?: readonly Monitor[] | false;
  /** Reviews flagged rollouts (see `createLlmAuditor`). */
  auditor?: Auditor;
  /** How often the UI's index follows the change feed (default 500 ms). */
  indexPollMs?: number;
  /** How often `/api/stream` polls the store when idle (default 250 ms). */
  streamPollMs?: number;
  /** How long a login session lasts (default 12 h; logout ends it at once). */
  sessionTtlMs?: number;
}

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
  /** Ends live streams and background loops. Idempotent. */
  close(): Promise<void>;
}

/** A built UI app with its background work. */
export interface UiApp {
  app: Hono;
  index: RunIndex;
  monitors: MonitorRunner | null;
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

const STRATEGIES = new Set<string>(MergeStrategySchema.options);

/**
 * Builds the UI app over a store (what {@link createUi} mounts; usable alone, e.g. with
 * `app.request()` in tests or behind another server).
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
  const streamPollMs = options.streamPollMs ?? 250;
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
  const callCache = new Map<number, CallFact>();
  const texts = new RolloutText(store);
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

  app.onError((err, c) => {
    const error = toHttpError("ui", err, c.req.raw);
    return fail(c, error.status, error.code, error.message);
  });

  const wantsJson = (c: Context) => {
    const path = new URL(c.req.url).pathname;
    return path.includes("/api/") || path.endsWith(".json") || path.endsWith(".ipynb") ||
      path.includes("/fragments/");
  };
  const fail = (c: Context, status: number, code: string, message: string) => {
    if (wantsJson(c)) return c.json({ error: { code, message } }, status as 400);
    const body = status === 401 ? loginPage(base, message) : html`
      <!doctype html>
      <title>${status} · reins</title>
      <link rel="stylesheet" href="${base}/static/app.css">
      <main>
        <h1>${status}</h1>
        <p class="err" id="error">${message}</p>
        <p><a href="${base}/">overview</a></p>
      </main>
    `;
    return c.html(body.toString(), status as 400);
  };

  // The stylesheet and script hold nothing secret; the login form needs the stylesheet.
  app.get(
    "/static/app.css",
    (c) => c.body(APP_CSS, 200, { "content-type": "text/css; charset=utf-8" }),
  );
  app.get(
    "/static/app.js",
    (c) => c.body(APP_JS, 200, { "content-type": "text/javascript; charset=utf-8" }),
  );

  const cookiePath = base || "/";
  app.get("/login", (c) => c.html(loginPage(base, null).toString()));
  app.post("/login", bodyLimits({ maxBytes: 16 * 1024 }), async (c) => {
    const form = await c.req.parseBody();
    const key = typeof form.key === "string" ? form.key : "";
    const access = key
      ? checkAccess(new Headers({ authorization: `Bearer ${key}` }), keys, sessions)
      : "missing";
    if (access !== "ok") {
      return c.html(loginPage(base, "key: not the gateway's admin key").toString(), 401);
    }
    setCookie(c, SESSION_COOKIE, sessions.create(), {
      path: cookiePath,
      httpOnly: true,
      sameSite: "Strict",
    });
    return c.redirect(`${base}/`, 303);
  });
  app.get("/logout", (c) => {
    const session = getCookie(c, SESSION_COOKIE);
    if (session) sessions.revoke(session);
    deleteCookie(c, SESSION_COOKIE, { path: cookiePath, httpOnly: true, sameSite: "Strict" });
    return c.redirect(`${base}/login`, 303);
  });

  app.use("*", requireUiAccess(keys, sessions));

  const pageContext = async (): Promise<PageContext> => ({ base, seq: await store.lastSeq() });
  const phaseSnapshot = () => context.phase?.snapshot() ?? null;

  // ---- overview ---------------------------------------------------------------------------
  let evalCache: { seq: number; at: number; points: EvalPoint[] } = {
    seq: -1,
    at: -Infinity,
    points: [],
  };
  const overview = async (c: Context) => {
    await index.refresh(2_000);
    if (options.metricsPath) await index.loadMetricsFile(options.metricsPath);
    const view = overviewView(new URL(c.req.url).searchParams);
    // The eval curve scans the store's `val` rollouts: at most once per 5 s, and only after
    // something changed.
    if (evalCache.seq !== index.lastSeq && performance.now() - evalCache.at > 5_000) {
      evalCache = {
        seq: index.lastSeq,
        at: performance.now(),
        points: await loadEvalPoints(store),
      };
    }
    const evals = evalCache.points;
    return { view, body: overviewFragment(base, index, phaseSnapshot(), evals, view) };
  };
  const overviewPage = async (c: Context) => {
    const ctx = await pageContext();
    const { view, body: content } = await overview(c);
    const body = html`<h1>Run overview</h1>${
      liveRegion("overview", `${base}/fragments/overview${viewQuery(view)}`, {}, content)
    }`;
    return c.html(page(ctx, "Overview", "overview", body).toString());
  };
  app.get("/", overviewPage);
  app.get("/fragments/overview", async (c) => c.html((await overview(c)).body.toString()));

  // ---- rollouts ---------------------------------------------------------------------------
  const listQuery = (c: Context) => {
    const url = new URL(c.req.url);
    return parseOrThrow(RolloutListQuerySchema, Object.fromEntries(url.searchParams));
  };
  const rolloutList = async (c: Context) => {
    const query = listQuery(c);
    if (query.flagged || query.order === "newest") await index.refresh(5_000);
    return { query, page: await listRolloutPage(store, index, query, 5_000, texts) };
  };
  app.get("/rollouts", async (c) => {
    const ctx = await pageContext();
    const { query, page: list } = await rolloutList(c);
    const body = html`<h1>Rollouts</h1>${filterForm(base, query)}${
      liveRegion(
        "rollout-list",
        `${base}/fragments/rollouts${queryString(query, query.after)}`,
        { types: "status,reward,custom" },
        rolloutTable(base, query, list, index),
      )
    }`;
    return c.html(page(ctx, "Rollouts", "rollouts", body).toString());
  });
  app.get("/fragments/rollouts", async (c) => {
    const { query, page: list } = await rolloutList(c);
    return c.html(rolloutTable(base, query, list, index).toString());
  });
  app.get("/api/rollouts", async (c) => {
    const { page: list } = await rolloutList(c);
    return c.json({
      ...list,
      items: list.items.map((r) => ({
        ...r,
        flags: index.flags.get(r.rollout_id)?.flags ?? null,
      })),
    });
  });

  // ---- rollout detail ---------------------------------------------------------------------
  const strategyOf = (c: Context): MergeStrategy => {
    const s = c.req.query("strategy") ?? "prefix_merge";
    if (!STRATEGIES.has(s)) {
      throw new ValidationError("strategy", [
        `strategy: expected one of ${[...STRATEGIES].join(", ")}, got ${JSON.stringify(s)}`,
      ]);
    }
    return s as MergeStrategy;
  };
  const detail = async (c: Context) => {
    const id = c.req.param("id") ?? "";
    const strategy = strategyOf(c);
    const rollout = await store.getRollout(id);
    if (!rollout) throw new HttpError(404, `rollout_id: no rollout '${id}'`);
    const events = await store.listEvents(id);
    return detailFragment({
      base,
      rollout,
      events,
      strategy,
      ...(options.tokenizer ? { tokenizer: options.tokenizer } : {}),
    });
  };
  app.get("/rollouts/:id", async (c) => {
    const ctx = await pageContext();
    const id = c.req.param("id");
    const strategy = strategyOf(c);
    const body = liveRegion(
      "detail",
      `${base}/fragments/rollouts/${encodeURIComponent(id)}?strategy=${strategy}`,
      { rollout: id },
      await detail(c),
    );
    return c.html(page(ctx, `Rollout ${id}`, "rollouts", body).toString());
  });
  app.get("/fragments/rollouts/:id", async (c) => c.html((await detail(c)).toString()));
  const exportDoc = (c: Context) =>
    exportRollout(store, c.req.param("id") ?? "", {
      strategy: strategyOf(c),
      ...(options.tokenizer ? { tokenizer: options.tokenizer } : {}),
    });
  app.get("/api/rollouts/:id/export", async (c) => c.json(await exportDoc(c)));
  app.get("/rollouts/:id/export.json", async (c) => {
    const doc = await exportDoc(c);
    c.header(
      "content-disposition",
      `attachment; filename="${safeFileName(c.req.param("id") ?? "rollout")}.json"`,
    );
    return c.json(doc);
  });
  app.get("/rollouts/:id/notebook.ipynb", async (c) => {
    const id = c.req.param("id");
    if (!(await store.getRollout(id))) {
      throw new HttpError(404, `rollout_id: no rollout '${id}'`);
    }
    c.header("content-disposition", `attachment; filename="${safeFileName(id)}.ipynb"`);
    return c.json(rolloutNotebook(new URL(c.req.url).origin, base, id));
  });

  // ---- runs -------------------------------------------------------------------------------
  app.get("/runs", async (c) => {
    const ctx = await pageContext();
    await index.refresh(2_000);
    const runs = [
      ...(options.runsDir ? await runsInDirectory(options.runsDir) : []),
      ...await runsInGateway(store, index),
    ];
    const body = html`<h1>Runs</h1>${
      runsFragment(base, runs, runsView(new URL(c.req.url).searchParams))
    }`;
    return c.html(page(ctx, "Runs", "runs", body).toString());
  });

  // ---- proxy ------------------------------------------------------------------------------
  const proxy = async () => {
    await index.refresh(2_000);
    const facts: CallFact[] = [];
    for (const { seq, rollout_id } of index.recentCalls) {
      let fact = callCache.get(seq);
      if (!fact) {
        const [e] = await store.listEvents(rollout_id, {
          type: "model_request",
          after_seq: seq - 1,
          limit: 1,
        });
        if (!e || e.type !== "model_request") continue;
        const p = e.payload;
        fact = {
          seq,
          rollout_id,
          upstream: p.upstream,
          http_status: p.http_status,
          error: p.error,
          latency_ms: p.latency_ms,
          retry_count: p.retry_count,
          flavor: p.flavor,
          created_at: e.created_at,
        };
        callCache.set(seq, fact);
      }
      facts.push(fact);
    }
    if (callCache.size > 2_000) {
      const keep = new Set(index.recentCalls.map((r) => r.seq));
      for (const seq of callCache.keys()) if (!keep.has(seq)) callCache.delete(seq);
    }
    return proxyFragment(base, phaseSnapshot(), await store.listModels(), facts);
  };
  app.get("/proxy", async (c) => {
    const ctx = await pageContext();
    const body = html`<h1>Proxy</h1>${
      liveRegion(
        "proxy",
        `${base}/fragments/proxy`,
        { types: "model_request,model" },
        await proxy(),
      )
    }`;
    return c.html(page(ctx, "Proxy", "proxy", body).toString());
  });
  app.get("/fragments/proxy", async (c) => c.html((await proxy()).toString()));
  app.get("/api/phase", (c) => c.json(phaseSnapshot()));

  // ---- live change feed -------------------------------------------------------------------
  app.get("/api/stream", (c) => {
    return changeFeedResponse(c, {
      store,
      signals: [closing.signal],
      comment: "reins ui change feed",
      retryMs: 1000,
      wait: async (signal) => {
        await sleep(streamPollMs, signal);
        return streamPollMs;
      },
    });
  });

  // Mounted sub-apps do not match `<base>/`; a catch-all serves it (and UI-style 404s).
  app.get("*", (c) => {
    const path = new URL(c.req.url).pathname;
    if (path === `${base}/`) return overviewPage(c);
    return fail(c, 404, "not_found", `path: no UI page ${path}`);
  });

  let closedOnce: Promise<void> | null = null;
  return {
    app,
    index,
    monitors,
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

function safeFileName(id: string): string {
  return id.replace(/[^A-Za-z0-9._-]/g, "_");
}

function loginPage(base: string, error: string | null): SafeHtml {
  return html`
    <!doctype html>
    <html lang="en">
      <head>
        <meta charset="utf-8">
        <title>Log in · reins</title>
        <link rel="stylesheet" href="${base}/static/app.css">
      </head>
      <body>
        <main>
    <h1>reins Live UI</h1><p>Enter the gateway's admin key.</p>
    ${error ? html`<p class="err" id="error">${error}</p>` : ""}
    <form method="post" action="${base}/login" id="login"><input type="password" name="key" id="key"
    autocomplete="current-password" size="40"> <button type="submit">Log in</button></form>
        </main>
      </body>
    </html>
  `;
}
