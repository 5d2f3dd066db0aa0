/**
 * The reins Live UI (docs/architecture.md#live-ui), served by the gateway under `/ui`: a run
 * overview with training-step charts, a filterable rollout list that pages on the server, a rollout
 * detail page down to the token (trained vs context tokens, logprob shading, why each sample
 * split), the proxy's phase and upstream health, and a rollout export. Pages update live over the
 * change feed; every page and data endpoint needs the gateway's admin key. Monitors run on
 * each finished rollout and their flags show up in the list and the detail.
 *
 * @example
 * ```ts
 * import { startGateway } from "../gateway/mod.ts";
 * import { loadQwen3Tokenizer } from "../tokens/mod.ts";
 * import { createUi } from "./mod.ts";
 * const ui = createUi({ tokenizer: await loadQwen3Tokenizer() });
 * const gw = await startGateway({ mounts: [ui.mount] }); // e.g. { db: "runs/demo.db", … }
 * console.log(`open ${gw.url}/ui/login and paste the admin key`);
 * // … later
 * await ui.close();
 * await gw.close();
 * ```
 *
 * @module
 */
export {
  createUi,
  createUiApp,
  type Ui,
  type UiApp,
  type UiContext,
  type UiOptions,
} from "./app.ts";
export { type Access, checkAccess, requireUiAccess, SESSION_COOKIE, UiSessions } from "./auth.ts";
export { escapeHtml, html, type HtmlValue, isSafeHtml, type SafeHtml, unsafeRaw } from "./html.ts";
export { exportRollout, rolloutNotebook } from "./export.ts";
export { harnessOf, listRolloutPage, type RolloutListPage } from "./query.ts";
export { type FlagSummary, RunIndex } from "./run_index.ts";
export { type CallFact, type UpstreamStats, upstreamStats } from "./proxy_view.ts";
export { flagsOf } from "./detail.ts";
export { MAX_TOKENS_SHOWN, tokenView } from "./token_view.ts";
