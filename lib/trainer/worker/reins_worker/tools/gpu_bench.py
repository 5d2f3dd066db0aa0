"""GPU benchmark of the trainer engine: training throughput and model FLOPs utilisation (MFU)
of a ~0.5B built-in decoder in bf16, through the worker's own forward_backward/optim_step code.

    cd lib/trainer/worker
    python3 -m reins_worker.tools.gpu_bench           # one H200/H100-class GPU, < 5 minutes
    python3 -m reins_worker.tools.gpu_bench --tiny    # CPU smoke run of the same code path

Prints `gpu_tok_per_s: <n>`, `gpu_generate_tok_per_s: <n>` and, last, `gpu_mfu: <fraction>`.
FLOPs per trained token = 6·N (N = matmul parameters, LM head included) + 6·L·T·d_attn
(causal attention, forward + backward); the peak is the GPU's dense bf16 figure.
"""

from __future__ import annotations

import argparse
import time
from typing import Optional

import torch
import torch.backends.cuda
import torch.backends.cudnn

from ..engine import Engine
from ..generation import GenerateScheduler
from .measure import HALF_B, TINY, generate, known_peak, make_batch, sync, time_training
from ..model import non_embedding_matmul_params
from ..validate import GenerateSpec, InitSpec, OptimizerSpec, parse_model_config

TINY_256 = dict(TINY, max_seq_len=256)


def detect_peak(device: torch.device, override: Optional[float]) -> float:
    peak = known_peak(device, override)
    if peak is not None:
        return peak
    if device.type == "cuda":
        name = torch.cuda.get_device_name(device)
        print(f"warning: unknown GPU {name!r}; assuming 989 TFLOP/s (pass --peak-tflops)")
        return 989.4e12
    return 1e12  # CPU: a nominal 1 TFLOP/s, so that the code path prints a number


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--tiny", action="store_true", help="tiny model on the CPU (code-path check)")
    p.add_argument("--steps", type=int, default=None, help="timed optimizer steps")
    p.add_argument("--warmup", type=int, default=None)
    p.add_argument("--seq-len", type=int, default=None)
    p.add_argument("--rows", type=int, default=None, help="rows per forward_backward call")
    p.add_argument("--micro-batches", type=int, default=None, help="calls per optimizer step")
    p.add_argument("--compile", action="store_true", help="torch.compile the model (torch>=2)")
    p.add_argument("--peak-tflops", type=float, default=None)
    p.add_argument("--gen-requests", type=int, default=None)
    p.add_argument("--gen-tokens", type=int, default=None)
    args = p.parse_args()

    tiny = args.tiny or not torch.cuda.is_available()
    if not args.tiny and tiny:
        print("warning: no CUDA device; running the --tiny configuration on the CPU")
    device = torch.device("cpu" if tiny else "cuda")
    cfg = parse_model_config(TINY_256 if tiny else HALF_B, "config")
    steps = args.steps or (2 if tiny else 20)
    warmup = args.warmup or (1 if tiny else 3)
    seq = args.seq_len or (64 if tiny else 2048)
    rows = args.rows or (2 if tiny else 8)
    micro = args.micro_batches or (2 if tiny else 4)
    gen_requests = args.gen_requests or (2 if tiny else 32)
    gen_tokens = args.gen_tokens or (8 if tiny else 128)

    if device.type == "cuda":
        torch.backends.cuda.matmul.allow_tf32 = True
        torch.backends.cudnn.allow_tf32 = True

    engine = Engine()
    t0 = time.perf_counter()
    state = engine.init(
        InitSpec(
            kind="builtin",
            config=cfg,
            seed=0,
            path=None,
            optimizer=OptimizerSpec(lr=1e-4, weight_decay=0.01, grad_clip=1.0),
            dtype="float32" if tiny else "bfloat16",
            device=str(device),
        )
    )
    print(
        f"model: {state['parameter_count'] / 1e6:.1f}M parameters on {state['device']} "
        f"({torch.cuda.get_device_name(device) if device.type == 'cuda' else 'cpu'}), "
        f"compute {state['dtype']}, torch {torch.__version__}, init {time.perf_counter() - t0:.1f}s"
    )
    model = engine.model
    assert model is not None
    compiled = False
    if args.compile:
        compile_fn = getattr(torch, "compile", None)
        if compile_fn is None:
            print("warning: torch.compile is not available in this torch; running eager")
        else:
            # The training path calls model.hidden (the LM head runs on trained positions only).
            model.hidden = compile_fn(model.hidden)
            compiled = True

    batches = [make_batch(rows, seq, cfg["vocab_size"], device, i) for i in range(micro)]
    train = time_training(engine, batches, seq, warmup, steps)
    print(f"warmup: {warmup} steps in {train['warmup_s']:.1f}s")
    elapsed = train["train_s"]
    tok_per_s = train["train_tok_per_s"]
    flops_per_token = train["flops_per_token"]
    model_cfg = engine.config
    assert model_cfg is not None
    n_matmul = non_embedding_matmul_params(model_cfg)
    peak = detect_peak(device, args.peak_tflops)
    mfu = tok_per_s * flops_per_token / peak
    mem = f", peak memory {train['peak_memory_gib']:.1f} GiB" if "peak_memory_gib" in train else ""
    print(
        f"train: {steps} steps × {micro} micro-batches × {rows}×{seq} tokens in {elapsed:.2f}s, "
        f"grad_norm {train['last_grad_norm']:.3f}{mem}"
    )
    print(
        f"flops/token: {flops_per_token / 1e9:.2f} GFLOP (6N, N={n_matmul / 1e6:.1f}M matmul "
        f"params, + causal attention); peak {peak / 1e12:.1f} TFLOP/s"
    )

    # Batched generation with the KV cache (eager: decode shapes change every call).
    if compiled:
        del model.hidden
    specs = [
        GenerateSpec(
            prompt_ids=[(i * 7 + t) % cfg["vocab_size"] for t in range(64)],
            max_tokens=gen_tokens,
            temperature=1.0,
            top_p=1.0,
            stop_ids=[],
            seed=i,
            stream=False,
        )
        for i in range(gen_requests)
    ]
    scheduler = GenerateScheduler(engine, window_s=0.005, max_batch=max(1, gen_requests))
    generate(engine, specs[:1], scheduler)  # warm-up
    sync(device)
    t0 = time.perf_counter()
    made = generate(engine, specs, scheduler)
    sync(device)
    gen_s = time.perf_counter() - t0
    scheduler.close()
    produced = sum(len(m["ids"]) for m in made)
    print(f"generate: {gen_requests} requests × {gen_tokens} tokens in {gen_s:.2f}s")

    prefix = "cpu_tiny" if device.type == "cpu" else "gpu"
    print(f"{prefix}_tok_per_s: {tok_per_s:.0f}")
    print(f"{prefix}_generate_tok_per_s: {produced / gen_s:.0f}")
    print(f"gpu_mfu: {mfu:.4f}")


if __name__ == "__main__":
    main()
