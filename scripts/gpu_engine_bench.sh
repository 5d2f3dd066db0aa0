#!/usr/bin/env bash
# The engine bench (benches/engine.ts) on a GPU machine: llama.cpp through node-llama-cpp's
# prebuilt CUDA build (@node-llama-cpp/linux-x64-cuda, installed by `deno install`), the torch
# worker on CUDA, the same prompts and the same demo-size policy as the CPU run. Prints the
# bench's `name: value` lines (parity of the f32/f16/q8_0 exports, engine and worker
# tokens/s, speedup, weight-sync ms) and keeps a copy under $OUT (or the current directory).
#
#   scripts/gpu_engine_bench.sh [--only parity,generate]
#
# Needs: an NVIDIA driver (nvidia-smi), Deno, and a Python with a CUDA torch (REINS_PYTHON, or
# /usr/bin/python3). Write down only figures this script printed on the machine it ran on.
set -euo pipefail
cd "$(dirname "$0")/.."
out="${OUT:-.}"
mkdir -p "$out"
{
  echo "# $(date -u +%FT%TZ) $(hostname)"
  nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader || true
  echo "# python: ${REINS_PYTHON:-/usr/bin/python3}"
} | tee "$out/gpu_engine_bench.txt"
deno install >/dev/null
# Fails fast, with llama.cpp's reason, when the CUDA binary cannot load on this machine.
deno eval --ext=ts 'import { llamaStatus } from "./lib/engine/llama_eval.ts";
const s = await llamaStatus("cuda"); console.log("# llama.cpp cuda:", JSON.stringify(s));
Deno.exit(s.available ? 0 : 1);' | tee -a "$out/gpu_engine_bench.txt"
deno run -A benches/engine.ts --gpu cuda --worker-device cuda "$@" | tee -a "$out/gpu_engine_bench.txt"
