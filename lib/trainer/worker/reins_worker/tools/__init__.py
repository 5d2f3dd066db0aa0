"""Operator tools that run beside the worker, not inside a request: `cpu_probe` (the CPU matmul
rate and BLAS the server reports in /health), `gpu_bench` (`python -m
reins_worker.tools.gpu_bench`: printed training and sampling figures) and `gpu_check` (`python
-m reins_worker.tools.gpu_check`: the JSON figures of docs/scale.md), the last two sharing
`measure`."""
