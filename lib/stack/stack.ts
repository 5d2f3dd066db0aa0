/**
 * The one way reins assembles a running stack: a gateway with the proxy and the Live UI mounted
 * on it. The service CLIs (`bin/`), the training loop's embedded stack (`lib/loop/embedded.ts`)
 * and the test fixtures all start their stacks here, so a new mount or a changed shutdown order
 * is one edit. This module is the composition root of the service packages: the gateway knows
 * neither the proxy nor the UI; only this module puts them together (see
 * `docs/architecture.md`, "Layers").
 *
 * @module
 */
import {
  type Mount,
  type RunningGateway,
  startGateway,
  type StartGatewayOptions,
} from "../gateway/server.ts";
import { proxyMount, type ProxyMountOptions } from "../proxy/app.ts";
import type { Ui, UiOptions } from "../ui/app.ts";

/** Options of {@link startStack}: the gateway's own, plus what to mount on it. */
export interface StackOptions extends Omit<StartGatewayOptions, "mounts"> {
  /** Serves the proxy at `/proxy` (tokenizer and upstream of the policy); absent: no proxy. */
  proxy?: ProxyMountOptions;
  /** Serves the Live UI at `/ui` (or `ui.base`); absent: no UI. */
  ui?: UiOptions;
  /** Further sub-apps, mounted after the proxy and the UI. */
  mounts?: Mount[];
}

/** A running stack. */
export interface RunningStack extends AsyncDisposable {
  gateway: RunningGateway;
  /** The gateway's base URL (the proxy is under `/proxy`, the UI under `/ui`). */
  url: string;
  /** The UI, when one was asked for. */
  ui: Ui | null;
  /** Closes the UI (its open streams would hold the server's shutdown), then the gateway. */
  close(): Promise<void>;
}

/**
 * Starts a gateway with the proxy and the UI mounted as asked.
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * import { loadCharTokenizer } from "../tokens/char.ts";
 * import { startStack } from "./stack.ts";
 * const tokenizer = await loadCharTokenizer();
 * await using stack = await startStack({
 *   proxy: { tokenizer, upstream: { kind: "token_level", endpoints: ["http://127.0.0.1:9"] } },
 *   ui: { tokenizer, monitors: false },
 * });
 * const health = await fetch(`${stack.url}/v1/health`);
 * assert.equal((await health.json()).ok, true);
 * assert.equal((await fetch(`${stack.url}/ui/login`)).status, 200);
 * ```
 */
export async function startStack(options: StackOptions = {}): Promise<RunningStack> {
  const { proxy, ui: uiOptions, mounts: extra, ...gatewayOptions } = options;
  // The UI (its charts and tables: Plot, linkedom, polars, ~0.8 s to load) is imported only when
  // asked for: a training run's stack, a test's or a script's, usually serves none.
  const ui = uiOptions ? (await import("../ui/app.ts")).createUi(uiOptions) : null;
  const mounts: Mount[] = [
    ...(proxy ? [proxyMount(proxy)] : []),
    ...(ui ? [ui.mount] : []),
    ...(extra ?? []),
  ];
  let gateway: RunningGateway;
  try {
    gateway = await startGateway({ ...gatewayOptions, mounts });
  } catch (error) {
    await ui?.close();
    throw error;
  }
  let closing: Promise<void> | undefined;
  const close = () =>
    closing ??= (async () => {
      await ui?.close();
      await gateway.close();
    })();
  return { gateway, url: gateway.url, ui, close, [Symbol.asyncDispose]: close };
}
