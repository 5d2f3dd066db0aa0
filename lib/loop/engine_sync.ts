/**
 * The loop's side of weight sync: save the worker's weights where the engine's exporter reads
 * them, and have the engine serve the new version (lib/engine/sync.ts). Runs inside the update
 * phase, so that no held call reaches the engine before it serves what was just trained.
 *
 * @module
 */
import type { SyncReport, WeightSync } from "../engine/sync.ts";
import type { TrainerClient } from "../trainer/client.ts";
import type { ProgressSink } from "./progress.ts";

/**
 * Syncs `engine` to `version`: from the worker's memory when the engine's sync exports from
 * there, else from `<outDir>/checkpoints/engine-sync.pt`, saved first (the worker kind only
 * checks the version).
 *
 * @example
 * ```ts ignore
 * await syncEngine(sync, client, "runs/demo", 4, progress);
 * ```
 */
export async function syncEngine(
  engine: WeightSync,
  client: Pick<TrainerClient, "save">,
  outDir: string,
  version: number,
  progress?: ProgressSink,
): Promise<SyncReport> {
  let checkpoint = "";
  if (engine.needsCheckpoint) {
    await Deno.mkdir(`${outDir}/checkpoints`, { recursive: true });
    // The worker may run elsewhere in the file system's eyes: give it an absolute path.
    checkpoint = `${await Deno.realPath(`${outDir}/checkpoints`)}/engine-sync.pt`;
    await client.save(checkpoint);
  }
  const report = await engine.syncWeights(version, checkpoint);
  progress?.status(
    `synced v${version} to ${engine.kind} in ${report.total_ms.toFixed(0)} ms ` +
      `(export ${report.export_ms.toFixed(0)}, load ${report.load_ms.toFixed(0)})`,
  );
  return report;
}
