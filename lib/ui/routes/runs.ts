/**
 * Runs routes: the comparison (`/runs`), the metric explorer (`/metrics`) and the metrics as
 * files other tools read (`/api/metrics.csv`, `.parquet`, `.tfevents`).
 *
 * @module
 */
import { Hono } from "hono";
import { z } from "zod";
import { HttpError } from "../../util/error.ts";
import { explorerFragment, ExplorerQuerySchema } from "../explorer.ts";
import { html } from "../html.ts";
import { page } from "../layout.ts";
import { displayStep, flattenStep, metricRows, metricsTable } from "../metrics.ts";
import { runsFragment, RunsQuerySchema } from "../runs_view.ts";
import { tfEventsFile, tfEventsFileName } from "../tfevents.ts";
import { safeFileName, type UiDeps, validQuery } from "./deps.ts";

const many = z.preprocess(
  (v) => v === undefined ? [] : Array.isArray(v) ? v : [v],
  z.array(z.string().max(400)).max(500),
);
const ExportQuerySchema = z.object({
  /** Runs to export (at least one; a TensorBoard file holds exactly one). */
  run: many.refine((r) => r.length > 0, "expected at least one run id"),
  /** Only these metrics (default: every one). */
  metric: many,
});

/** The runs sub-app. */
export function runRoutes(deps: UiDeps): Hono {
  const { base } = deps;
  const app = new Hono();
  app.get("/runs", validQuery(RunsQuerySchema), async (c) => {
    const ctx = await deps.pageContext();
    const body = html`<h1>Runs</h1>${runsFragment(base, await deps.runs(), c.req.valid("query"))}`;
    return c.html(page(ctx, "Runs", "runs", body).toString());
  });
  app.get("/metrics", validQuery(ExplorerQuerySchema), async (c) => {
    const ctx = await deps.pageContext();
    const body = html`<h1>Metrics</h1>${
      explorerFragment(base, await deps.runs(), c.req.valid("query"))
    }`;
    return c.html(page(ctx, "Metrics", "metrics", body).toString());
  });
  for (const format of ["csv", "parquet", "tfevents"] as const) {
    app.get(`/api/metrics.${format}`, validQuery(ExportQuerySchema), async (c) => {
      const query = c.req.valid("query");
      const all = await deps.runs();
      const runs = query.run.map((id) => {
        const run = all.find((r) => r.id === id);
        if (!run) throw new HttpError(404, `run: no run '${id}'`);
        return run;
      });
      const only = query.metric.length ? new Set(query.metric) : undefined;
      const name = safeFileName(runs.length === 1 ? runs[0].name : "runs");
      if (format === "tfevents") {
        if (runs.length !== 1) {
          throw new HttpError(400, `run: a TensorBoard file holds one run, got ${runs.length}`);
        }
        const bytes = tfEventsFile(runs[0].steps.map((s) => ({
          step: displayStep(s.step),
          wall_time: (typeof s.time === "number" ? s.time : Date.now()) / 1000,
          scalars: Object.fromEntries(
            Object.entries(flattenStep(s)).filter(([k]) => !only || only.has(k)),
          ),
        })));
        return c.body(bytes, 200, {
          "content-type": "application/octet-stream",
          "content-disposition": `attachment; filename="${tfEventsFileName(undefined, name)}"`,
        });
      }
      const bytes = metricsTable(metricRows(runs, only), format);
      return c.body(bytes, 200, {
        "content-type": format === "csv" ? "text/csv; charset=utf-8" : "application/octet-stream",
        "content-disposition": `attachment; filename="${name}-metrics.${format}"`,
      });
    });
  }
  return app;
}
