/**
 * Rollout routes: the filtered list (page, live fragment, JSON), the detail page down to the
 * token, the export and its notebook, and the diff of two rollouts' transcripts.
 *
 * @module
 */
import { Hono } from "hono";
import { z } from "zod";
import { HttpError } from "../../util/error.ts";
import { MergeStrategySchema, type Rollout } from "../../schema.ts";
import { RolloutListQuerySchema } from "../../schema/ui.ts";
import { detailFragment } from "../detail.ts";
import { diffView, transcriptOf } from "../diff_view.ts";
import { exportRollout, rolloutNotebook } from "../export.ts";
import { html } from "../html.ts";
import { liveRegion, page } from "../layout.ts";
import { listRolloutPage } from "../query.ts";
import { filterForm, queryString, rolloutTable } from "../rollouts_view.ts";
import { safeFileName, type UiDeps, validQuery } from "./deps.ts";

const StrategyQuerySchema = z.object({
  strategy: z.preprocess(
    (v) => v === "" ? undefined : v,
    MergeStrategySchema.default("prefix_merge"),
  ),
});

const DiffQuerySchema = z.object({
  /** The two rollouts (the group view's checkboxes), or `a` and `b`. */
  r: z.preprocess(
    (v) => v === undefined ? [] : Array.isArray(v) ? v : [v],
    z.array(z.string().min(1).max(200)).max(2),
  ),
  a: z.string().min(1).max(200).optional(),
  b: z.string().min(1).max(200).optional(),
}).transform((q, ctx) => {
  const ids = q.r.length ? q.r : [q.a, q.b].filter((x): x is string => x !== undefined);
  if (ids.length !== 2) {
    ctx.addIssue({
      code: "custom",
      path: ["r"],
      message: `expected two rollouts to compare, got ${ids.length}`,
    });
    return z.NEVER;
  }
  return { a: ids[0], b: ids[1] };
});

/** The rollouts sub-app. */
export function rolloutRoutes(deps: UiDeps): Hono {
  const { base, index, store, texts } = deps;
  const app = new Hono();
  const getRollout = async (id: string): Promise<Rollout> => {
    const rollout = await store.getRollout(id);
    if (!rollout) throw new HttpError(404, `rollout_id: no rollout '${id}'`);
    return rollout;
  };
  const tokenizer = async () => (await deps.tokenizer()).tokenizer ?? undefined;

  // ---- list ---------------------------------------------------------------------------
  const list = validQuery(RolloutListQuerySchema);
  const rolloutList = async (query: z.output<typeof RolloutListQuerySchema>) => {
    if (query.flagged || query.order === "newest") await index.refresh(5_000);
    return await listRolloutPage(store, index, query, 5_000, texts);
  };
  app.get("/rollouts", list, async (c) => {
    const ctx = await deps.pageContext();
    const query = c.req.valid("query");
    const body = html`<h1>Rollouts</h1>${filterForm(base, query)}${
      liveRegion(
        "rollout-list",
        `${base}/fragments/rollouts${queryString(query, query.after)}`,
        { types: "status,reward,custom" },
        rolloutTable(base, query, await rolloutList(query), index),
      )
    }`;
    return c.html(page(ctx, "Rollouts", "rollouts", body).toString());
  });
  app.get("/fragments/rollouts", list, async (c) => {
    const query = c.req.valid("query");
    return c.html(rolloutTable(base, query, await rolloutList(query), index).toString());
  });
  app.get("/api/rollouts", list, async (c) => {
    const page = await rolloutList(c.req.valid("query"));
    return c.json({
      ...page,
      items: page.items.map((r) => ({ ...r, flags: index.flags.get(r.rollout_id)?.flags ?? null })),
    });
  });

  // ---- detail and export --------------------------------------------------------------
  const strategy = validQuery(StrategyQuerySchema);
  const detail = async (
    id: string,
    s: z.output<typeof StrategyQuerySchema>["strategy"],
  ) => {
    const rollout = await getRollout(id);
    const events = await store.listEvents(id);
    const tok = await tokenizer();
    return detailFragment({
      base,
      rollout,
      events,
      strategy: s,
      ...(tok ? { tokenizer: tok } : {}),
    });
  };
  app.get("/rollouts/:id", strategy, async (c) => {
    const ctx = await deps.pageContext();
    const id = c.req.param("id");
    const s = c.req.valid("query").strategy;
    const body = liveRegion(
      "detail",
      `${base}/fragments/rollouts/${encodeURIComponent(id)}?strategy=${s}`,
      { rollout: id },
      await detail(id, s),
    );
    return c.html(page(ctx, `Rollout ${id}`, "rollouts", body).toString());
  });
  app.get(
    "/fragments/rollouts/:id",
    strategy,
    async (c) =>
      c.html((await detail(c.req.param("id"), c.req.valid("query").strategy)).toString()),
  );
  const exportDoc = async (id: string, s: z.output<typeof StrategyQuerySchema>["strategy"]) => {
    const tok = await tokenizer();
    return exportRollout(store, id, { strategy: s, ...(tok ? { tokenizer: tok } : {}) });
  };
  app.get(
    "/api/rollouts/:id/export",
    strategy,
    async (c) => c.json(await exportDoc(c.req.param("id"), c.req.valid("query").strategy)),
  );
  app.get("/rollouts/:id/export.json", strategy, async (c) => {
    const doc = await exportDoc(c.req.param("id"), c.req.valid("query").strategy);
    c.header(
      "content-disposition",
      `attachment; filename="${safeFileName(c.req.param("id"))}.json"`,
    );
    return c.json(doc);
  });
  app.get("/rollouts/:id/notebook.ipynb", async (c) => {
    const id = c.req.param("id");
    await getRollout(id);
    c.header("content-disposition", `attachment; filename="${safeFileName(id)}.ipynb"`);
    return c.json(rolloutNotebook(new URL(c.req.url).origin, base, id));
  });

  // ---- diff of two transcripts ----------------------------------------------------------
  app.get("/diff", validQuery(DiffQuerySchema), async (c) => {
    const { a, b } = c.req.valid("query");
    const tok = await tokenizer();
    const side = async (id: string) => {
      const rollout = await getRollout(id);
      return { id, reward: rollout.reward, text: transcriptOf(await store.listEvents(id), tok) };
    };
    const ctx = await deps.pageContext();
    const body = html`<h1>Diff of two rollouts</h1>${diffView(base, await side(a), await side(b))}`;
    return c.html(page(ctx, `Diff ${a} ${b}`, "rollouts", body).toString());
  });
  return app;
}
