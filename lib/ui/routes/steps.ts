/**
 * Drill-down routes: a training step (`/steps/:n`, numbered from 1 like the overview) with its
 * rollouts grouped, and one group (`/groups/:id`) with each rollout's samples.
 *
 * @module
 */
import { Hono } from "hono";
import { z } from "zod";
import type { Rollout } from "../../schema.ts";
import {
  algoSettings,
  groupFacts,
  groupsView,
  MAX_DRILL_ROLLOUTS,
  stepLabel,
  stepView,
} from "../drill.ts";
import { html } from "../html.ts";
import { page } from "../layout.ts";
import { type UiDeps, validParam } from "./deps.ts";

const StepParamSchema = z.object({
  n: z.coerce.number().int().min(1).max(1e9),
});
const GroupParamSchema = z.object({ id: z.string().min(1).max(200) });

async function readConfig(runDir: string | undefined): Promise<Record<string, unknown> | null> {
  if (!runDir) return null;
  try {
    const value = JSON.parse(await Deno.readTextFile(`${runDir}/config.json`));
    return value && typeof value === "object" && !Array.isArray(value) ? value : null;
  } catch {
    return null;
  }
}

/** The drill-down sub-app. */
export function stepRoutes(deps: UiDeps): Hono {
  const { base, index, store } = deps;
  const app = new Hono();
  const collect = async (filter: { labels?: Record<string, string>; group_id?: string }) => {
    const out: Rollout[] = [];
    let after: string | undefined;
    do {
      const pageOf = await store.listRollouts({
        ...filter,
        order: "desc",
        limit: 128,
        ...(after ? { after } : {}),
      });
      out.push(...pageOf.items);
      after = pageOf.next_cursor ?? undefined;
    } while (after && out.length < MAX_DRILL_ROLLOUTS);
    return { rollouts: out.slice(0, MAX_DRILL_ROLLOUTS), truncated: after !== undefined };
  };
  const facts = async (rollouts: Rollout[]) =>
    groupFacts(
      store,
      rollouts,
      algoSettings(await readConfig(deps.options.runDir)),
      (await deps.tokenizer()).tokenizer ?? undefined,
    );

  app.get("/steps/:n", validParam(StepParamSchema), async (c) => {
    const { n } = c.req.valid("param");
    await index.refresh(2_000);
    if (deps.options.metricsPath) await index.loadMetricsFile(deps.options.metricsPath);
    const { rollouts, truncated } = await collect({ labels: { step: stepLabel(n) } });
    const train = rollouts.filter((r) => r.labels.role !== "eval" && r.labels.kind !== "run");
    const ctx = await deps.pageContext();
    const body = html`<h1>Step ${n}</h1>${
      stepView(base, n, index.steps.get(n - 1), await facts(train), truncated)
    }`;
    return c.html(page(ctx, `Step ${n}`, "overview", body).toString());
  });

  app.get("/groups/:id", validParam(GroupParamSchema), async (c) => {
    const { id } = c.req.valid("param");
    const { rollouts, truncated } = await collect({ group_id: id });
    const ctx = await deps.pageContext();
    const body = html`
      <h1>Group ${id}</h1>
      <p
        class="muted">${rollouts.length} rollout(s)${truncated
          ? ", the newest shown"
          : ""} · <a href="${base}/rollouts?group=${encodeURIComponent(
            id,
          )}">as a list</a></p>${groupsView(base, await facts(rollouts))}
    `;
    return c.html(page(ctx, `Group ${id}`, "rollouts", body).toString());
  });
  return app;
}
