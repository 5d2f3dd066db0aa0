/**
 * Progress display of a grid: cells done / running / left and an ETA from the mean time of
 * the cells finished in this session (without the first one, which pays one-off warm-up costs).
 *
 * @module
 */
import type { Cell } from "./grid.ts";
import type { CellSummary } from "./results.ts";

/** Receives the grid's progress (never throws). */
export interface GridProgress {
  start(counts: { total: number; done: number; todo: number }): void;
  cellStarted(cell: Cell): void;
  cellDone(cell: Cell, summary: CellSummary): void;
  cellFailed(cell: Cell, message: string): void;
  finish(): void;
}

/** Counts and ETA as a text line. */
export interface ProgressState {
  total: number;
  done: number;
  running: string[];
  left: number;
  /** Seconds per cell measured in this session (null before the first finishes). */
  secondsPerCell: number | null;
}

/**
 * The progress line of a state.
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * import { progressLine } from "./progress.ts";
 * assert.equal(
 *   progressLine({ total: 12, done: 4, running: ["a"], left: 7, secondsPerCell: 30 }),
 *   "[grid] 4/12 done, 1 running, 7 queued, ETA 4m00s",
 * );
 * ```
 */
export function progressLine(state: ProgressState): string {
  const remaining = state.left + state.running.length;
  const eta = state.secondsPerCell === null
    ? "ETA ?"
    : `ETA ${formatDuration(remaining * state.secondsPerCell)}`;
  return `[grid] ${state.done}/${state.total} done, ${state.running.length} running, ` +
    `${state.left} queued, ${eta}`;
}

function formatDuration(seconds: number): string {
  const s = Math.round(seconds);
  return `${Math.floor(s / 60)}m${String(s % 60).padStart(2, "0")}s`;
}

/**
 * The default display: one line per event on stdout (`write` to redirect it).
 *
 * @example
 * ```ts ignore
 * await runGrid(grid, runner, { progress: lineProgress() });
 * ```
 */
export function lineProgress(write: (line: string) => void = console.log): GridProgress {
  const state: ProgressState = { total: 0, done: 0, running: [], left: 0, secondsPerCell: null };
  const durations: number[] = [];
  return {
    start(counts) {
      state.total = counts.total;
      state.done = counts.done;
      state.left = counts.todo;
      write(
        `[grid] ${counts.total} cells: ${counts.done} already done, ${counts.todo} to run`,
      );
    },
    cellStarted(cell) {
      state.left--;
      state.running.push(cell.id);
      write(`${progressLine(state)} — started ${cell.id}`);
    },
    cellDone(cell, summary) {
      state.running = state.running.filter((id) => id !== cell.id);
      state.done++;
      durations.push(summary.wall_s);
      // The session's first cell also pays one-off costs (a warm start): leave it out once
      // others finished.
      const recent = durations.length > 1 ? durations.slice(1) : durations;
      state.secondsPerCell = recent.reduce((a, b) => a + b, 0) / recent.length;
      write(
        `${progressLine(state)} — ${cell.id}: reward ${summary.final_reward.toFixed(3)} in ${
          summary.wall_s.toFixed(1)
        }s`,
      );
    },
    cellFailed(cell, message) {
      state.running = state.running.filter((id) => id !== cell.id);
      write(`[grid] FAILED ${cell.id}: ${message}`);
    },
    finish() {
      write(`[grid] ${state.done}/${state.total} cells done`);
    },
  };
}

/** A display that shows nothing (tests). */
export function silentGridProgress(): GridProgress {
  const nothing = () => {};
  return {
    start: nothing,
    cellStarted: nothing,
    cellDone: nothing,
    cellFailed: nothing,
    finish: nothing,
  };
}

/**
 * CPU seconds (user + system) used so far by this process, its reaped children (harness
 * processes) and its live children (the trainer worker), from `/proc` (null elsewhere than
 * Linux). The difference over a cell is its CPU cost, which, unlike its wall time, does not
 * grow with the machine's load.
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * import { cpuSeconds } from "./progress.ts";
 * const t = cpuSeconds();
 * assert.ok(t === null || t > 0);
 * ```
 */
export function cpuSeconds(): number | null {
  try {
    const ticks = 100; // USER_HZ on Linux
    const fields = (pid: string) => {
      const stat = Deno.readTextFileSync(`/proc/${pid}/stat`);
      return stat.slice(stat.lastIndexOf(")") + 2).split(" ").map(Number);
    };
    // Fields after the command: utime is the 12th (index 11), then stime, cutime, cstime.
    const self = fields("self");
    let total = self[11] + self[12] + self[13] + self[14];
    const children = new Set<string>();
    for (const task of Deno.readDirSync("/proc/self/task")) {
      const list = Deno.readTextFileSync(`/proc/self/task/${task.name}/children`).trim();
      for (const pid of list ? list.split(" ") : []) children.add(pid);
    }
    for (const pid of children) {
      try {
        const c = fields(pid);
        total += c[11] + c[12] + c[13] + c[14];
      } catch { /* exited meanwhile */ }
    }
    return total / ticks;
  } catch {
    return null;
  }
}
