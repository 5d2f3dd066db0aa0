"""GPU benchmark of the trainer engine: training throughput and model FLOPs utilisation (MFU)
of a ~0.5B built-in decoder in bf16, through the worker's own forward_backward/optim_step code.

    cd lib/trainer/worker
    python3 -m reins_worker.gpu_bench           # one H200/H100-class GPU, < 5 minutes
    python3 -m reins_worker.gpu_bench --tiny    # CPU smoke run of the same code path

Prints `gpu_tok_per_s: <n>`, `gpu_generate_tok_per_s: <n>` and, last, `gpu_mfu: <fraction>`.
FLOPs per trained token = 6·N (N = matmul parameters, LM head included) + 6·L·T·d_attn
(causal attention, forward + backward); the peak is the GPU's dense bf16 figure.
"""

from __future__ import annotations

import argparse
import math
import threading
import time
from typing import Dict, List, Optional

import torch

from .batch import Batch
from .engine import Engine
from .generation import GenerateScheduler, GenJob
from .model import non_embedding_matmul_params
from .validate import (
    GenerateSpec,
    InitSpec,
    LossSpec,
    OptimizerSpec,
    RequestError,
    parse_model_config,
)

# ~0.46B parameters (465M, tied embeddings); head_dim 128 (flash friendly), GQA 5:1.
HALF_B: Dict[str, object] = {
    "vocab_size": 32768,
    "d_model": 1280,
    "n_layers": 20,
    "n_heads": 10,
    "n_kv_heads": 2,
    "d_ff": 4480,
    "max_seq_len": 4096,
    "tie_embeddings": True,
}
TINY: Dict[str, object] = {
    "vocab_size": 256,
    "d_model": 64,
    "n_layers": 2,
    "n_heads": 4,
    "n_kv_heads": 2,
    "d_ff": 128,
    "max_seq_len": 256,
}

# Dense bf16 peak (no sparsity), FLOP/s.
PEAKS = {"H200": 989.4e12, "H100": 989.4e12, "H800": 989.4e12, "A100": 312e12, "L40S": 362e12}


def detect_peak(device: torch.device, override: Optional[float]) -> float:
    if override:
        return override * 1e12
    if device.type == "cuda":
        name = torch.cuda.get_device_name(device)
        for key, peak in PEAKS.items():
            if key in name:
                return peak
        print(f"warning: unknown GPU {name!r}; assuming 989 TFLOP/s (pass --peak-tflops)")
        return 989.4e12
    return 1e12  # CPU: a nominal 1 TFLOP/s, so that the code path prints a number


def make_batch(rows: int, seq: int, vocab: int, device: torch.device, seed: int) -> Batch:
    g = torch.Generator().manual_seed(seed)
    tokens = torch.randint(0, vocab, (rows, seq), generator=g)
    positions = torch.arange(seq)[None].expand(rows, seq).contiguous()
    pred = positions - 1
    loss_mask = pred >= 0
    n = int(loss_mask.sum())
    adv = torch.where(torch.rand(rows, 1, generator=g) > 0.5, 1.0, -1.0).expand(rows, seq)
    return Batch(
        tokens=tokens.to(device),
        positions=positions.to(device),
        mask=None,
        pred=pred.to(device),
        loss_mask=loss_mask.to(device),
        advantages=adv.contiguous().to(device),
        weights=torch.full((rows, seq), 1.0 / n).to(device),
        # Close to a fresh model's logprobs (uniform), so ratios stay near 1 as in real runs.
        behaviour=torch.full((rows, seq), -math.log(vocab)).to(device),
        sequence=torch.arange(rows)[:, None].expand(rows, seq).contiguous().to(device),
    )


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


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
    cfg = parse_model_config(TINY if tiny else HALF_B, "config")
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

    loss = LossSpec("ppo", clip_low=0.2, clip_high=0.28)
    batches = [make_batch(rows, seq, cfg["vocab_size"], device, i) for i in range(micro)]

    def train_step() -> float:
        for b in batches:
            engine.forward_backward_batch(b, loss)
        return engine.optim_step()["grad_norm"]

    t0 = time.perf_counter()
    for _ in range(warmup):
        train_step()
    sync(device)
    print(f"warmup: {warmup} steps in {time.perf_counter() - t0:.1f}s")
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)

    t0 = time.perf_counter()
    for _ in range(steps):
        grad_norm = train_step()
    sync(device)
    elapsed = time.perf_counter() - t0
    tokens = steps * micro * rows * seq
    tok_per_s = tokens / elapsed
    model_cfg = engine.config
    assert model_cfg is not None
    n_matmul = non_embedding_matmul_params(model_cfg)
    d_attn = model_cfg.n_heads * model_cfg.resolved_head_dim
    flops_per_token = 6 * n_matmul + 6 * model_cfg.n_layers * seq * d_attn
    peak = detect_peak(device, args.peak_tflops)
    mfu = tok_per_s * flops_per_token / peak
    mem = (
        f", peak memory {torch.cuda.max_memory_allocated(device) / 2**30:.1f} GiB"
        if device.type == "cuda"
        else ""
    )
    print(
        f"train: {steps} steps × {micro} micro-batches × {rows}×{seq} tokens in {elapsed:.2f}s, "
        f"grad_norm {grad_norm:.3f}{mem}"
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
    produced = [0]
    scheduler = GenerateScheduler(engine, window_s=0.005, max_batch=max(1, gen_requests))

    def run(batch: List[GenerateSpec]) -> None:
        """Submits `batch` to the scheduler (the server's own path) and waits for it."""
        left = [len(batch)]
        errors: List[RequestError] = []
        done = threading.Event()

        def emit(ids: List[int], _lps: List[float]) -> None:
            produced[0] += len(ids)

        def finished() -> None:
            left[0] -= 1
            if left[0] == 0:
                done.set()

        def fail(err: RequestError) -> None:
            errors.append(err)
            finished()

        for s in batch:
            scheduler.submit(GenJob(s, emit, lambda _r, _v: finished(), fail))
        done.wait()
        if errors:
            raise errors[0]

    run(specs[:1])  # warm-up
    produced[0] = 0
    sync(device)
    t0 = time.perf_counter()
    run(specs)
    sync(device)
    gen_s = time.perf_counter() - t0
    scheduler.close()
    print(f"generate: {gen_requests} requests × {gen_tokens} tokens in {gen_s:.2f}s")

    prefix = "cpu_tiny" if device.type == "cpu" else "gpu"
    print(f"{prefix}_tok_per_s: {tok_per_s:.0f}")
    print(f"{prefix}_generate_tok_per_s: {produced[0] / gen_s:.0f}")
    print(f"gpu_mfu: {mfu:.4f}")


if __name__ == "__main__":
    main()
