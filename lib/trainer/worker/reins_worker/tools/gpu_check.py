"""The GPU check: one script, only this package and PyTorch (plus `transformers` for the Hugging
Face part), that measures what a GPU run of reins rests on and writes the figures as JSON.

    cd lib/trainer/worker
    python3 -m reins_worker.tools.gpu_check --out gpu_check.json      # one H200/H100: < 8 min
    python3 -m reins_worker.tools.gpu_check --tiny --out check.json   # CPU: same code, tiny models

Sections (each records its figures, or `{"error": ...}` / `{"skipped": ...}`, and the next runs):

- `builtin`: the built-in decoder at ~0.5B parameters, bf16 compute (fp32 master weights):
  `forward_backward` + `optim_step` tokens/s and MFU at 16k tokens per micro-batch (one 16 384-
  token sequence, causal), generation tokens/s through the server's continuous batcher, and the
  Pearson correlation of the sampler's logprobs with the training pass's logprobs of the same
  tokens at the same policy version (bf16 both; LEGO-RL asks ≥ 0.99).
- `hf_qwen3`: the same figures on the Hugging Face path, a Qwen3-architecture model (Qwen3-0.6B's
  shape) built from its config with random weights: nothing is downloaded.
- `data_parallel`: with two or more GPUs, a 2-rank worker (`--ranks 2`, NCCL) on the built-in
  model: tokens/s, its scaling over one process, and whether both ranks hold the same weights.
  `--tiny` runs it on 2 CPU ranks (gloo).

FLOPs per trained token = 6·N (N = matmul parameters, LM head included) + 6·L·T·d_attn
(attention, forward + backward, as benches/trainer.ts and `measure.flops_per_token` count it);
MFU divides by the GPU's dense bf16 peak (`--peak-tflops` to override). On the CPU, MFU is null.
"""

from __future__ import annotations

import argparse
import datetime
import json
import math
import os
import subprocess
import sys
import threading
import time
import urllib.request
from typing import Any, Callable, Dict, List, Optional

import torch
import torch.backends.cuda
import torch.backends.cudnn

from ..batch import Batch
from ..engine import Built, Engine
from .measure import HALF_B, TINY, generate, known_peak, make_batch, sync, time_training
from ..model import ModelConfig, build_builtin
from ..validate import GenerateSpec, OptimizerSpec, parse_forward_backward, parse_model_config

BUILTIN = dict(HALF_B, max_seq_len=16384 + 512)
# Qwen3-0.6B's shape (its config.json), random weights.
QWEN3_06B: Dict[str, Any] = {
    "vocab_size": 151936,
    "hidden_size": 1024,
    "intermediate_size": 3072,
    "num_hidden_layers": 28,
    "num_attention_heads": 16,
    "num_key_value_heads": 8,
    "head_dim": 128,
    "max_position_embeddings": 40960,
    "rope_theta": 1000000.0,
    "rms_norm_eps": 1e-6,
    "tie_word_embeddings": True,
}
TINY_QWEN3 = dict(
    QWEN3_06B,
    vocab_size=256,
    hidden_size=64,
    intermediate_size=128,
    num_hidden_layers=2,
    num_attention_heads=4,
    num_key_value_heads=2,
    head_dim=16,
    max_position_embeddings=512,
)


class Plan:
    """Sizes of one run: the GPU defaults, or `--tiny` for the CPU."""

    def __init__(self, tiny: bool) -> None:
        self.tiny = tiny
        self.seq = 128 if tiny else 16384  # tokens per micro-batch (one sequence)
        self.micro = 2  # micro-batches per optimizer step
        self.warmup = 1 if tiny else 2
        self.steps = 2 if tiny else 5
        self.gen_requests = 4 if tiny else 32
        self.gen_prompt = 16 if tiny else 256
        self.gen_tokens = 8 if tiny else 256
        self.align_requests = 4 if tiny else 16
        self.align_tokens = 16 if tiny else 128


def pearson(xs: List[float], ys: List[float]) -> Optional[float]:
    n = len(xs)
    if n < 2:
        return None
    mx, my = sum(xs) / n, sum(ys) / n
    sxy = sum((x - mx) * (y - my) for x, y in zip(xs, ys))
    sxx = sum((x - mx) ** 2 for x in xs)
    syy = sum((y - my) ** 2 for y in ys)
    return sxy / math.sqrt(sxx * syy) if sxx > 0 and syy > 0 else None


def measure(engine: Engine, plan: Plan, peak: Optional[float]) -> Dict[str, Any]:
    """Training throughput and MFU, generation throughput, sampling–training alignment; a part
    that fails records its error and the next part still runs."""
    out: Dict[str, Any] = {}
    for name, part in (("train", train_figures), ("generate", generate_figures)):
        try:
            out.update(part(engine, plan, peak))
        except Exception as e:
            out[f"{name}_error"] = f"{type(e).__name__}: {e}"
    try:
        out.update(alignment_figures(engine, plan))
    except Exception as e:
        out["alignment_error"] = f"{type(e).__name__}: {e}"
    return out


def _specs(vocab: int, n: int, prompt: int, tokens: int, seed: int) -> List[GenerateSpec]:
    g = torch.Generator().manual_seed(seed)
    return [
        GenerateSpec(
            prompt_ids=torch.randint(1, vocab, (prompt,), generator=g).tolist(),
            max_tokens=tokens,
            temperature=1.0,
            top_p=1.0,
            stop_ids=[],
            seed=seed + i,
            stream=False,
        )
        for i in range(n)
    ]


def train_figures(engine: Engine, plan: Plan, peak: Optional[float]) -> Dict[str, Any]:
    """forward_backward + optim_step over micro-batches of one `plan.seq`-token sequence."""
    assert engine.config is not None and engine.model is not None
    device = engine.device
    vocab = engine.config.vocab_size
    batches: List[Batch] = [make_batch(1, plan.seq, vocab, device, i) for i in range(plan.micro)]
    timed = time_training(engine, batches, plan.seq, plan.warmup, plan.steps)
    out: Dict[str, Any] = {
        "parameters": sum(p.numel() for p in engine.model.parameters()),
        "dtype": str(engine.dtype).replace("torch.", ""),
        "tokens_per_micro_batch": plan.seq,
        "micro_batches_per_step": plan.micro,
        "timed_steps": plan.steps,
        **timed,
        "mfu": timed["train_tok_per_s"] * timed["flops_per_token"] / peak if peak else None,
    }
    return out


def generate_figures(engine: Engine, plan: Plan, _peak: Optional[float]) -> Dict[str, Any]:
    """Tokens/s of `plan.gen_requests` seeded requests through the continuous batcher."""
    assert engine.config is not None
    device = engine.device
    vocab = engine.config.vocab_size

    def specs(n: int, prompt: int, tokens: int, seed: int) -> List[GenerateSpec]:
        return _specs(vocab, n, prompt, tokens, seed)

    generate(engine, specs(1, plan.gen_prompt, 4, 99))  # warm-up
    sync(device)
    t0 = time.perf_counter()
    made = generate(engine, specs(plan.gen_requests, plan.gen_prompt, plan.gen_tokens, 1))
    sync(device)
    gen_s = time.perf_counter() - t0
    produced = sum(len(m["ids"]) for m in made)
    return {
        "generate_requests": plan.gen_requests,
        "generate_prompt_tokens": plan.gen_prompt,
        "generate_max_tokens": plan.gen_tokens,
        "generate_s": gen_s,
        "generate_tok_per_s": produced / gen_s,
    }


def alignment_figures(engine: Engine, plan: Plan) -> Dict[str, Any]:
    """Same version: sample, then score the very tokens with the training pass (no step
    between); Pearson of the two logprob (and probability) series over the sampled tokens."""
    assert engine.config is not None
    cfg = engine.config
    vocab = cfg.vocab_size
    version = engine.policy_version
    align_specs = _specs(vocab, plan.align_requests, plan.gen_prompt, plan.align_tokens, 1000)
    sampled = generate(engine, align_specs)
    rows = []
    for spec, s in zip(align_specs, sampled):
        tokens_ = spec.prompt_ids + s["ids"]
        mask = [0] * len(spec.prompt_ids) + [1] * len(s["ids"])
        rows.append(
            {
                "tokens": tokens_,
                "loss_mask": mask,
                "advantages": [0.0] * len(tokens_),
                "loss_weights": [0.0] * len(tokens_),
                "rollout_logprobs": [0.0] * len(spec.prompt_ids) + s["logprobs"],
            }
        )
    parsed, spec_loss, _ = parse_forward_backward(
        {"rows": rows, "loss": {"kind": "ppo"}, "return_logprobs": True},
        vocab,
        cfg.max_seq_len,
    )
    trained = engine.forward_backward(parsed, spec_loss, True)["logprobs"]
    engine.zero_grad()
    assert engine.policy_version == version
    xs: List[float] = []
    ys: List[float] = []
    for spec, s, lp in zip(align_specs, sampled, trained):
        xs.extend(s["logprobs"])
        ys.extend(lp[len(spec.prompt_ids) :])
    return {
        "alignment_tokens": len(xs),
        "alignment_policy_version": version,
        "logprob_pearson": pearson(xs, ys),
        "prob_pearson": pearson([math.exp(x) for x in xs], [math.exp(y) for y in ys]),
        "max_abs_logprob_diff": max((abs(x - y) for x, y in zip(xs, ys)), default=None),
    }


def builtin_section(plan: Plan, device: torch.device, peak: Optional[float]) -> Dict[str, Any]:
    config = ModelConfig(**parse_model_config(TINY if plan.tiny else BUILTIN, "config"))
    engine = Engine()
    t0 = time.perf_counter()
    built = Built(build_builtin(config, 0), config, 0, None, "builtin")
    with engine.weights_change(), engine.lock:
        engine.install(built, device, None, OptimizerSpec(lr=1e-5, grad_clip=1.0))
    out = {"config": config.to_dict(), "init_s": time.perf_counter() - t0}
    out.update(measure(engine, plan, peak))
    return out


def hf_section(plan: Plan, device: torch.device, peak: Optional[float]) -> Dict[str, Any]:
    try:
        import transformers  # type: ignore
    except ImportError:
        return {"skipped": "transformers is not installed"}
    from ..hf_model import hf_from_config

    fields = dict(TINY_QWEN3 if plan.tiny else QWEN3_06B, model_type="qwen3")
    if plan.tiny:
        fields["max_position_embeddings"] = 512
    engine = Engine()
    t0 = time.perf_counter()
    model, config = hf_from_config(fields)
    with engine.weights_change(), engine.lock:
        engine.install(Built(model, config, 0, None, "hf"), device, None, OptimizerSpec(lr=1e-5))
    out: Dict[str, Any] = {
        "transformers": transformers.__version__,
        "architecture": type(model.model).__name__,  # type: ignore[union-attr]
        "config": fields,
        "init_s": time.perf_counter() - t0,
    }
    out.update(measure(engine, plan, peak))
    return out


def dp_section(plan: Plan, single_tok_s: Optional[float]) -> Dict[str, Any]:
    """A 2-rank worker process (the package's own launcher) spoken to over HTTP, as a client."""
    gpus = torch.cuda.device_count() if torch.cuda.is_available() else 0
    if not plan.tiny and gpus < 2:
        return {"skipped": f"{gpus} GPU(s): the data-parallel check needs two"}
    args = [sys.executable, "-u", "-m", "reins_worker", "--ranks", "2", "--port", "0"]
    if plan.tiny:
        args += ["--threads", "1", "--backend", "gloo"]
    # The directory that holds the `reins_worker` package (this file is reins_worker/tools/…).
    package_root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    proc = subprocess.Popen(
        args,
        cwd=package_root,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        env=dict(os.environ, PYTHONPATH=package_root),
    )
    assert proc.stdout is not None
    try:
        while True:
            line = proc.stdout.readline().decode()
            if not line:
                raise RuntimeError("the 2-rank worker exited before it was ready")
            if line.startswith("REINS_WORKER_READY "):
                url = f"http://127.0.0.1:{json.loads(line.split(' ', 1)[1])['port']}"
                break
        threading.Thread(target=proc.stdout.read, daemon=True).start()  # keep draining

        def call(path: str, body: Any = None) -> Any:
            data = None if body is None else json.dumps(body).encode()
            req = urllib.request.Request(
                url + path, data=data, headers={"content-type": "application/json"}
            )
            with urllib.request.urlopen(req, timeout=600) as res:
                return json.loads(res.read())

        cfg = TINY if plan.tiny else BUILTIN
        device = "cpu" if plan.tiny else "cuda"
        call("/init", {"model": {"kind": "builtin", "config": cfg, "seed": 0}, "device": device})
        g = torch.Generator().manual_seed(0)

        def row() -> Dict[str, Any]:
            n = plan.seq
            tokens = torch.randint(0, cfg["vocab_size"], (n,), generator=g).tolist()
            return {
                "tokens": tokens,
                "loss_mask": [0] + [1] * (n - 1),
                "advantages": [1.0] * n,
                "loss_weights": [0.0] + [1.0 / (2 * plan.micro * (n - 1))] * (n - 1),
                "rollout_logprobs": [-math.log(cfg["vocab_size"])] * n,
            }

        # Each rank gets the micro-batches one process runs per step: twice the tokens per step.
        rows = [row() for _ in range(2 * plan.micro)]
        body = {"rows": rows, "loss": {"kind": "ppo"}, "rank_of_row": [0, 1] * plan.micro}
        for _ in range(plan.warmup):
            call("/forward_backward", body)
            call("/optim_step", {})
        t0 = time.perf_counter()
        for _ in range(plan.steps):
            call("/forward_backward", body)
            call("/optim_step", {})
        dp_s = time.perf_counter() - t0
        tok_s = plan.steps * len(rows) * plan.seq / dp_s
        state = call("/state")
        sums = {r["param_checksum"] for r in state["ranks"]}
        return {
            "ranks": 2,
            "backend": "gloo" if plan.tiny else "nccl",
            "tokens_per_step": len(rows) * plan.seq,
            "train_tok_per_s": tok_s,
            "speedup_vs_one_process": tok_s / single_tok_s if single_tok_s else None,  # ideal: 2
            "ranks_hold_same_weights": len(sums) == 1,
            "note": "includes the HTTP/JSON transfer of the rows, as a client pays it",
        }
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()


def run_section(
    name: str, fn: Callable[[], Dict[str, Any]], started: float, budget_s: float
) -> Dict[str, Any]:
    if time.perf_counter() - started > budget_s:
        return {"skipped": f"time budget of {budget_s:.0f} s spent"}
    t0 = time.perf_counter()
    try:
        out = fn()
    except Exception as e:  # one broken section must not lose the others' figures
        out: Dict[str, Any] = {"error": f"{type(e).__name__}: {e}"}
    out["section_s"] = time.perf_counter() - t0
    print(f"{name}: {json.dumps(out)[:2000]}", flush=True)
    if torch.cuda.is_available():
        torch.cuda.empty_cache()
    return out


def main(argv: Optional[List[str]] = None) -> Dict[str, Any]:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--out", default="gpu_check.json", help="where the JSON goes")
    p.add_argument("--tiny", action="store_true", help="tiny models on the CPU (code-path check)")
    p.add_argument("--peak-tflops", type=float, default=None)
    p.add_argument("--budget-s", type=float, default=420.0, help="later sections skip after it")
    p.add_argument("--skip", action="append", default=[], choices=["builtin", "hf", "dp"])
    args = p.parse_args(argv)
    tiny = args.tiny or not torch.cuda.is_available()
    if tiny and not args.tiny:
        print("warning: no CUDA device; running the --tiny configuration on the CPU", flush=True)
    device = torch.device("cpu" if tiny else "cuda")
    if device.type == "cuda":
        torch.backends.cuda.matmul.allow_tf32 = True
        torch.backends.cudnn.allow_tf32 = True
    plan = Plan(tiny)
    peak = known_peak(device, args.peak_tflops)
    started = time.perf_counter()
    report: Dict[str, Any] = {
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "device": torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu",
        "device_count": torch.cuda.device_count() if torch.cuda.is_available() else 0,
        "torch": torch.__version__,
        "tiny": tiny,
        "peak_flops": peak,
        "flops_formula": "6*N_matmul + 6*n_layers*seq*d_attn per trained token",
    }
    single: Dict[str, Any] = {}
    if "builtin" not in args.skip:
        single = run_section(
            "builtin", lambda: builtin_section(plan, device, peak), started, args.budget_s
        )
        report["builtin"] = single
    if "hf" not in args.skip:
        report["hf_qwen3"] = run_section(
            "hf_qwen3", lambda: hf_section(plan, device, peak), started, args.budget_s
        )
    if "dp" not in args.skip:
        report["data_parallel"] = run_section(
            "data_parallel",
            lambda: dp_section(plan, single.get("train_tok_per_s")),
            started,
            args.budget_s,
        )
    report["wall_s"] = time.perf_counter() - started
    with open(args.out, "w") as f:
        json.dump(report, f, indent=2)
    print(f"wrote {args.out} ({report['wall_s']:.0f} s)", flush=True)
    return report


if __name__ == "__main__":
    main()
