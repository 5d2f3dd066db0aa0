/**
 * The run overview (`/`) and its live fragment: counts, step charts, the steps table.
 *
 * @module
 */
import { Hono } from "hono";
import type { Context } from "hono";
import { html } from "../html.ts";
import { liveRegion, page } from "../layout.ts";
import {
  type EvalPoint,
  loadEvalPoints,
  overviewFragment,
  overviewView,
  viewQuery,
} from "../overview.ts";
import type { UiDeps } from "./deps.ts";

/** The overview sub-app; `overviewPage` also answers the mount's bare `<base>/`. */
export function overviewRoutes(
  deps: UiDeps,
): { app: Hono; overviewPage: (c: Context) => Promise<Response> } {
  const { base, index, store, options } = deps;
  // The eval curve scans the store's `val` rollouts: at most once per 5 s, and only after
  // something changed.
  let evalCache: { seq: number; at: number; points: EvalPoint[] } = {
    seq: -1,
    at: -Infinity,
    points: [],
  };
  const overview = async (c: Context) => {
    await index.refresh(2_000);
    if (options.metricsPath) await index.loadMetricsFile(options.metricsPath);
    const view = overviewView(new URL(c.req.url).searchParams);
    if (evalCache.seq !== index.lastSeq && performance.now() - evalCache.at > 5_000) {
      evalCache = {
        seq: index.lastSeq,
        at: performance.now(),
        points: await loadEvalPoints(store),
      };
    }
    return {
      view,
      body: overviewFragment(base, index, deps.phaseSnapshot(), evalCache.points, view),
    };
  };
  const overviewPage = async (c: Context) => {
    const ctx = await deps.pageContext();
    const { view, body: content } = await overview(c);
    const body = html`<h1>Run overview</h1>${
      liveRegion("overview", `${base}/fragments/overview${viewQuery(view)}`, {}, content)
    }`;
    return c.html(page(ctx, "Overview", "overview", body).toString());
  };
  const app = new Hono();
  app.get("/", overviewPage);
  app.get("/fragments/overview", async (c) => c.html((await overview(c)).body.toString()));
  return { app, overviewPage };
}
