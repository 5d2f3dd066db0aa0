/**
 * Polling helper of the tests that wait on background work (controllers, gateways).
 *
 * @module
 */

/**
 * Calls `fn` every 50 ms until it returns a truthy value (returned) or `ms` pass (throws
 * `timed out waiting for <what>`).
 */
export async function waitFor<T>(
  fn: () => Promise<T | null | undefined | false>,
  ms: number,
  what: string,
): Promise<T> {
  const end = Date.now() + ms;
  while (Date.now() < end) {
    const value = await fn();
    if (value) return value;
    await new Promise((r) => setTimeout(r, 50));
  }
  throw new Error(`timed out waiting for ${what}`);
}
