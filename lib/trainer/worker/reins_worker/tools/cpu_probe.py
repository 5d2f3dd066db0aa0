"""How fast this worker's CPU matmuls are, measured once at start-up and reported in /health.

Debian's python3-torch links the system `libblas.so.3`; when that alternative is the reference
BLAS (package libblas3) every CPU matmul runs ~50x slower than with OpenBLAS
(`apt-get install libopenblas0-pthread` switches it). pip's torch wheels bundle MKL/OpenBLAS.
"""

from __future__ import annotations

import os
import time
from typing import Any, Dict

import torch

# Below this fp32 rate the BLAS is almost surely the unoptimised reference one: a single AVX2
# core with OpenBLAS does 30-100 GFLOP/s at n=512, the reference BLAS 2-6 (README: Set up).
SLOW_GFLOPS = 20.0


def blas_library() -> str:
    """Which BLAS torch's CPU matmuls use: what torch was built with (pip wheels bundle MKL or
    OpenBLAS), else the `libblas.so.3` this process loaded, named by its directory (Debian's
    alternatives: `blas/` is the reference BLAS, `openblas-pthread/`, `blis-openmp/`, ...)."""
    config = torch.__config__.show()
    for marker, name in (("BLAS_INFO=mkl", "mkl"), ("BLAS_INFO=open", "openblas")):
        if marker in config:
            return f"{name} (bundled)"
    try:
        with open("/proc/self/maps", encoding="utf-8") as maps:
            libs = sorted({line.split()[-1] for line in maps if "/lib" in line})
    except OSError:
        return "unknown"
    for lib in libs:
        if os.path.basename(lib).startswith("libblas.so"):
            family = os.path.basename(os.path.dirname(lib))
            return "reference" if family == "blas" else family
    for key in ("openblas", "mkl", "blis"):
        if any(key in os.path.basename(lib) for lib in libs):
            return key
    return "unknown"


def matmul_gflops(n: int = 512, budget_s: float = 0.15) -> float:
    """fp32 n×n matmul rate on the CPU with torch's current thread count (best of the repeats
    that fit in `budget_s`, after one warm-up)."""
    a = torch.randn(n, n)
    b = torch.randn(n, n)
    torch.mm(a, b)
    best = float("inf")
    start = time.perf_counter()
    reps = 0
    while reps < 2 or time.perf_counter() - start < budget_s:
        t0 = time.perf_counter()
        torch.mm(a, b)
        best = min(best, time.perf_counter() - t0)
        reps += 1
        if reps >= 50:
            break
    return 2.0 * n**3 / best / 1e9


def cpu_probe() -> Dict[str, Any]:
    """The /health fields: rate, library, threads, and a warning naming the fix when slow."""
    gflops = matmul_gflops()
    blas = blas_library()
    out: Dict[str, Any] = {
        "cpu_matmul_gflops": round(gflops, 1),
        "blas": blas,
        "torch_threads": torch.get_num_threads(),
        "cpu_warning": None,
    }
    if gflops < SLOW_GFLOPS:
        fix = (
            "install an optimised BLAS: `apt-get install libopenblas0-pthread` (Debian's "
            "python3-torch then uses it), or use pip's torch, which bundles one"
            if blas in ("reference", "unknown")
            else "the BLAS is optimised, so the machine is busy or slow"
        )
        out["cpu_warning"] = (
            f"CPU matmul runs at {gflops:.1f} GFLOP/s fp32 (BLAS: {blas}), below "
            f"{SLOW_GFLOPS:.0f}: {fix}"
        )
    return out
