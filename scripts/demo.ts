/**
 * `deno task demo` — the main job of reins, on embedded defaults.
 *
 * The full run (SQLite gateway, local controller, built-in harness on the toy environment, a local
 * CPU worker with the tiny model, SFT warm start then collocated-async RL) lands with the
 * training-loop issue. Until then this prints the plan and checks the parts that exist.
 *
 * @module
 */
const plan = [
  "1. start the gateway (SQLite, runs/<name>/gateway.db) with the proxy mounted",
  "2. start a local PyTorch worker with the tiny built-in model (CPU)",
  "3. SFT warm start on the toy tool-using arithmetic task",
  "4. RL: built-in harness rollouts through the proxy, collocated async updates",
  "5. summary table (reward before → after, samples/rollout, alignment) and figures under runs/",
];
console.log("reins demo — what it will run:\n" + plan.map((line) => "  " + line).join("\n"));
console.log("\nThe end-to-end loop is not built yet (training-loop issue); nothing was trained.");
