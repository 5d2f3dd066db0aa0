"""Measurement pieces shared by `gpu_bench` (printed figures) and `gpu_check` (JSON figures): the
~0.5B model shape, GPU peaks, synthetic training batches, the FLOPs count, one timed training
loop over the worker's own forward_backward/optim_step, and generation through the server's
continuous batcher.

FLOPs per trained token = 6·N (N = matmul parameters, LM head included) + 6·L·T·d_attn
(causal attention, forward + backward); peaks are the GPUs' dense bf16 figures.
"""

from __future__ import annotations

import math
import threading
import time
from typing import Any, Dict, List, Optional

import torch

from ..batch import Batch
from ..engine import Engine
from ..generation import GenerateScheduler, GenJob
from ..model import ModelConfig, non_embedding_matmul_params
from ..validate import GenerateSpec, LossSpec, RequestError

# ~0.46B parameters (465M, tied embeddings); head_dim 128 (flash friendly), GQA 5:1.
HALF_B: Dict[str, Any] = {
    "vocab_size": 32768,
    "d_model": 1280,
    "n_layers": 20,
    "n_heads": 10,
    "n_kv_heads": 2,
    "d_ff": 4480,
    "max_seq_len": 4096,
    "tie_embeddings": True,
}
# The CPU code-path check's decoder (`--tiny`).
TINY: Dict[str, Any] = {
    "vocab_size": 256,
    "d_model": 64,
    "n_layers": 2,
    "n_heads": 4,
    "n_kv_heads": 2,
    "d_ff": 128,
    "max_seq_len": 512,
}

# Dense bf16 peak (no sparsity), FLOP/s.
PEAKS = {"H200": 989.4e12, "H100": 989.4e12, "H800": 989.4e12, "A100": 312e12, "L40S": 362e12}


def known_peak(device: torch.device, override_tflops: Optional[float]) -> Optional[float]:
    """`override_tflops` (in TFLOP/s) when given, else the table's peak for this CUDA device;
    None on the CPU or for a GPU the table does not list."""
    if override_tflops:
        return override_tflops * 1e12
    if device.type != "cuda":
        return None
    name = torch.cuda.get_device_name(device)
    for key, peak in PEAKS.items():
        if key in name:
            return peak
    return None


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def make_batch(rows: int, seq: int, vocab: int, device: torch.device, seed: int) -> Batch:
    """`rows` causal rows of `seq` random tokens, every position but the first trained."""
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


def flops_per_token(config: ModelConfig, seq: int) -> int:
    """Training FLOPs per token of a `seq`-token causal row (see the module doc)."""
    d_attn = config.n_heads * config.resolved_head_dim
    return 6 * non_embedding_matmul_params(config) + 6 * config.n_layers * seq * d_attn


def time_training(
    engine: Engine, batches: List[Batch], seq: int, warmup: int, steps: int
) -> Dict[str, Any]:
    """`warmup` untimed then `steps` timed optimizer steps, each one forward_backward call per
    batch (PPO loss) and one optim_step. Peak memory counts the timed steps only."""
    assert engine.config is not None
    device = engine.device
    loss = LossSpec("ppo", clip_low=0.2, clip_high=0.28)

    def step() -> float:
        for b in batches:
            engine.forward_backward_batch(b, loss)
        return float(engine.optim_step()["grad_norm"])

    t0 = time.perf_counter()
    for _ in range(warmup):
        step()
    sync(device)
    warmup_s = time.perf_counter() - t0
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
    grad_norm = float("nan")
    t0 = time.perf_counter()
    for _ in range(steps):
        grad_norm = step()
    sync(device)
    train_s = time.perf_counter() - t0
    tokens = steps * sum(int(b.tokens.numel()) for b in batches)
    out: Dict[str, Any] = {
        "warmup_s": warmup_s,
        "train_s": train_s,
        "train_tok_per_s": tokens / train_s,
        "flops_per_token": flops_per_token(engine.config, seq),
        "last_grad_norm": grad_norm,
    }
    if device.type == "cuda":
        out["peak_memory_gib"] = torch.cuda.max_memory_allocated(device) / 2**30
    return out


def generate(
    engine: Engine, specs: List[GenerateSpec], scheduler: Optional[GenerateScheduler] = None
) -> List[Dict[str, Any]]:
    """Runs `specs` through the server's continuous batcher (`scheduler`, else one of its own,
    closed at the end); returns ids and logprobs each; raises the first request's error."""
    own = scheduler is None
    sched = scheduler or GenerateScheduler(engine, window_s=0.005, max_batch=max(1, len(specs)))
    out: List[Dict[str, Any]] = [{"ids": [], "logprobs": []} for _ in specs]
    errors: List[RequestError] = []
    left = [len(specs)]
    done = threading.Event()
    lock = threading.Lock()

    def job(i: int) -> GenJob:
        def emit(ids: List[int], lps: List[float]) -> None:
            out[i]["ids"].extend(ids)
            out[i]["logprobs"].extend(lps)

        def finished(*_: Any) -> None:
            with lock:
                left[0] -= 1
                if left[0] == 0:
                    done.set()

        def fail(err: RequestError) -> None:
            errors.append(err)
            finished()

        return GenJob(specs[i], emit, finished, fail)

    try:
        for i in range(len(specs)):
            sched.submit(job(i))
        if specs:
            done.wait()
    finally:
        if own:
            sched.close()
    if errors:
        raise errors[0]
    return out
