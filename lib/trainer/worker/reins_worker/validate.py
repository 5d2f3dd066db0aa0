"""Request validation: every check runs before the model or optimizer is touched, and every
failure names the offending field (`rows[2].loss_mask`), mirroring lib/schema/trainer.ts."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional, Sequence, Tuple


class RequestError(Exception):
    """An error answered as HTTP `status` with `{"error": {"code", "message", "field"}}`."""

    def __init__(self, status: int, code: str, message: str, field_name: Optional[str] = None):
        super().__init__(message)
        self.status = status
        self.code = code
        self.message = message
        self.field = field_name

    def to_json(self) -> Dict[str, Any]:
        err: Dict[str, Any] = {"code": self.code, "message": self.message}
        if self.field is not None:
            err["field"] = self.field
        return {"error": err}


def bad(field_name: str, message: str) -> RequestError:
    return RequestError(400, "bad_request", f"{field_name}: {message}", field_name)


def _is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _is_num(v: Any) -> bool:
    return (isinstance(v, (int, float)) and not isinstance(v, bool)) and math.isfinite(v)


def obj(value: Any, name: str) -> Dict[str, Any]:
    if not isinstance(value, dict):
        raise bad(name, "expected an object")
    return value


def num(
    value: Any,
    name: str,
    lo: Optional[float] = None,
    hi: Optional[float] = None,
    lo_open: bool = False,
) -> float:
    if not _is_num(value):
        raise bad(name, "expected a finite number")
    if lo is not None and (value < lo or (lo_open and value == lo)):
        raise bad(name, f"must be {'>' if lo_open else '>='} {lo}, got {value}")
    if hi is not None and value > hi:
        raise bad(name, f"must be <= {hi}, got {value}")
    return float(value)


def integer(value: Any, name: str, lo: Optional[int] = None, hi: Optional[int] = None) -> int:
    if not _is_int(value):
        raise bad(name, "expected an integer")
    if lo is not None and value < lo:
        raise bad(name, f"must be >= {lo}, got {value}")
    if hi is not None and value > hi:
        raise bad(name, f"must be <= {hi}, got {value}")
    return int(value)


def boolean(value: Any, name: str) -> bool:
    if not isinstance(value, bool):
        raise bad(name, "expected true or false")
    return value


def string(value: Any, name: str) -> str:
    if not isinstance(value, str) or not value:
        raise bad(name, "expected a non-empty string")
    return value


def token_ids(value: Any, name: str, vocab_size: int, allow_empty: bool = False) -> List[int]:
    if not isinstance(value, list):
        raise bad(name, "expected an array of token ids")
    if not value and not allow_empty:
        raise bad(name, "expected at least one token id")
    # Fast path first (rows can hold 100k tokens); on failure, find the first bad element.
    if all(type(v) is int for v in value) and (
        not value or (min(value) >= 0 and max(value) < vocab_size)
    ):
        return value
    for i, v in enumerate(value):
        if not _is_int(v):
            raise bad(f"{name}[{i}]", "expected an integer token id")
        if v < 0 or v >= vocab_size:
            raise bad(f"{name}[{i}]", f"token id {v} is outside the vocabulary [0, {vocab_size})")
    return list(value)


def numbers(value: Any, name: str, length: int) -> List[float]:
    if not isinstance(value, list):
        raise bad(name, "expected an array of numbers")
    if len(value) != length:
        raise bad(name, f"expected {length} values (one per token), got {len(value)}")
    if all(type(v) in (int, float) for v in value) and all(map(math.isfinite, value)):
        return value
    for i, v in enumerate(value):
        if not _is_num(v):
            raise bad(f"{name}[{i}]", f"expected a finite number, got {v!r}")
    return [float(v) for v in value]


# ---------------------------------------------------------------------------------------------
# init


@dataclass
class OptimizerSpec:
    lr: float = 1e-5
    betas: Sequence[float] = (0.9, 0.999)
    weight_decay: float = 0.0
    eps: float = 1e-8
    grad_clip: float = 1.0
    warmup_steps: int = 0

    def lr_at(self, step: int) -> float:
        """Learning rate of optimizer step `step` (0-based): linear warmup, then constant."""
        if self.warmup_steps <= 0:
            return self.lr
        return self.lr * min(1.0, (step + 1) / self.warmup_steps)

    def to_dict(self) -> Dict[str, Any]:
        return {
            "lr": self.lr,
            "warmup_steps": self.warmup_steps,
            "betas": list(self.betas),
            "weight_decay": self.weight_decay,
            "eps": self.eps,
            "grad_clip": self.grad_clip,
        }


@dataclass
class InitSpec:
    kind: str
    config: Optional[Dict[str, Any]]
    seed: int
    path: Optional[str]
    optimizer: OptimizerSpec
    dtype: Optional[str]
    device: Optional[str]


_CONFIG_INTS = ["vocab_size", "d_model", "n_layers", "n_heads", "n_kv_heads", "d_ff", "max_seq_len"]


def parse_optimizer(value: Any, name: str = "optimizer") -> OptimizerSpec:
    if value is None:
        return OptimizerSpec()
    o = obj(value, name)
    spec = OptimizerSpec()
    if "lr" in o:
        spec.lr = num(o["lr"], f"{name}.lr", lo=0)
    if "betas" in o:
        betas = o["betas"]
        if not isinstance(betas, list) or len(betas) != 2:
            raise bad(f"{name}.betas", "expected two numbers [beta1, beta2]")
        spec.betas = (
            num(betas[0], f"{name}.betas[0]", lo=0, hi=0.999999),
            num(betas[1], f"{name}.betas[1]", lo=0, hi=0.999999),
        )
    if "weight_decay" in o:
        spec.weight_decay = num(o["weight_decay"], f"{name}.weight_decay", lo=0)
    if "eps" in o:
        spec.eps = num(o["eps"], f"{name}.eps", lo=0, lo_open=True)
    if "grad_clip" in o:
        spec.grad_clip = num(o["grad_clip"], f"{name}.grad_clip", lo=0)
    if "warmup_steps" in o:
        spec.warmup_steps = integer(o["warmup_steps"], f"{name}.warmup_steps", lo=0, hi=10_000_000)
    return spec


def parse_model_config(value: Any, name: str) -> Dict[str, Any]:
    c = obj(value, name)
    out: Dict[str, Any] = {}
    for key in _CONFIG_INTS:
        if key not in c:
            raise bad(f"{name}.{key}", "is required")
        out[key] = integer(c[key], f"{name}.{key}", lo=1, hi=10_000_000)
    if out["n_heads"] % out["n_kv_heads"] != 0:
        raise bad(f"{name}.n_kv_heads", "must divide n_heads")
    head_dim = c.get("head_dim")
    if head_dim is not None:
        out["head_dim"] = integer(head_dim, f"{name}.head_dim", lo=2)
        if out["head_dim"] % 2:
            raise bad(f"{name}.head_dim", "must be even (RoPE rotates pairs)")
    else:
        if out["d_model"] % out["n_heads"] != 0:
            raise bad(f"{name}.n_heads", "must divide d_model (or give head_dim)")
        if (out["d_model"] // out["n_heads"]) % 2:
            raise bad(f"{name}.n_heads", "d_model / n_heads must be even (RoPE rotates pairs)")
    out["tie_embeddings"] = boolean(c.get("tie_embeddings", True), f"{name}.tie_embeddings")
    out["rope_theta"] = num(c.get("rope_theta", 10000.0), f"{name}.rope_theta", lo=1)
    out["qk_norm"] = boolean(c.get("qk_norm", True), f"{name}.qk_norm")
    out["norm_eps"] = num(c.get("norm_eps", 1e-6), f"{name}.norm_eps", lo=0, lo_open=True)
    return out


def parse_init(body: Any) -> InitSpec:
    b = obj(body, "(body)")
    model = obj(b.get("model"), "model")
    kind = model.get("kind")
    if kind not in ("builtin", "hf", "checkpoint"):
        raise bad("model.kind", 'expected "builtin", "hf" or "checkpoint"')
    config = None
    path = None
    seed = 0
    if kind == "builtin":
        config = parse_model_config(model.get("config"), "model.config")
        seed = integer(model.get("seed", 0), "model.seed")
    else:
        path = string(model.get("path"), "model.path")
    dtype = b.get("dtype")
    if dtype is not None and dtype not in ("float32", "bfloat16", "float16"):
        raise bad("dtype", 'expected "float32", "bfloat16" or "float16"')
    device = b.get("device")
    if device is not None:
        device = string(device, "device")
    return InitSpec(kind, config, seed, path, parse_optimizer(b.get("optimizer")), dtype, device)


# ---------------------------------------------------------------------------------------------
# forward_backward


@dataclass
class Row:
    tokens: List[int]
    loss_mask: List[int]
    advantages: List[float]
    loss_weights: List[float]
    rollout_logprobs: List[float]
    parent: Optional[List[int]]
    segment_starts: List[int]
    # Derived: predecessor index per token (-1: none), position per token, segment id.
    pred: List[int] = field(default_factory=list)
    positions: List[int] = field(default_factory=list)
    segment: List[int] = field(default_factory=list)
    # Optional: sequence id per token for sequence-level losses (default: the segment).
    sequence_ids: Optional[List[int]] = None
    # Optional: π_prox per token (the policy at the start of the update), `proximal_logprobs`.
    proximal: Optional[List[float]] = None
    # Optional: the sampling temperature of each trained token (`temperatures`); the trainer
    # divides that position's logits by it, so its logprob is the one the sampler drew from.
    temperatures: Optional[List[float]] = None

    @property
    def sequence(self) -> List[int]:
        """Which sequence each token belongs to (GSPO's sequence ratio is taken per id)."""
        return self.sequence_ids if self.sequence_ids is not None else self.segment

    @property
    def linear(self) -> bool:
        return self.parent is None and len(self.segment_starts) <= 1


@dataclass
class LossSpec:
    kind: str
    clip_low: float = 0.2
    clip_high: float = 0.2
    dual_clip: Optional[float] = None
    gspo_clip_low: float = 3e-4
    gspo_clip_high: float = 4e-4
    tis_cap: Optional[float] = None
    kl_coef: float = 0.0
    old_logprobs: str = "rollout"
    # What the rows' sequence ids stand for (GSPO): "sample" or "call". The rows carry the ids;
    # this names them, so that a result can say which sequence its ratio was taken over.
    gspo_sequence: str = "sample"


def parse_loss(value: Any) -> LossSpec:
    o = obj(value, "loss")
    kind = o.get("kind")
    if kind not in ("ppo", "gspo", "ce"):
        raise bad("loss.kind", 'expected "ppo", "gspo" or "ce"')
    spec = LossSpec(kind)
    for key in ("clip_low", "clip_high", "gspo_clip_low", "gspo_clip_high", "kl_coef"):
        if o.get(key) is not None:
            setattr(spec, key, num(o[key], f"loss.{key}", lo=0))
    if spec.clip_low >= 1:
        raise bad("loss.clip_low", "must be < 1 (the ratio is clipped to [1 - clip_low, ...])")
    if spec.gspo_clip_low >= 1:
        raise bad("loss.gspo_clip_low", "must be < 1")
    if o.get("dual_clip") is not None:
        spec.dual_clip = num(o["dual_clip"], "loss.dual_clip", lo=1, lo_open=True)
    if o.get("tis_cap") is not None:
        spec.tis_cap = num(o["tis_cap"], "loss.tis_cap", lo=0, lo_open=True)
    old = o.get("old_logprobs", "rollout")
    if old not in ("rollout", "recompute"):
        raise bad("loss.old_logprobs", 'expected "rollout" or "recompute"')
    spec.old_logprobs = old
    gspo_sequence = o.get("gspo_sequence", "sample")
    if gspo_sequence not in ("sample", "call"):
        raise bad("loss.gspo_sequence", 'expected "sample" or "call"')
    spec.gspo_sequence = gspo_sequence
    return spec


def per_token_list(value: Any, name: str, n: int, what: str) -> None:
    """Refuses anything but a list of exactly one value per token, naming the field."""
    if not isinstance(value, list):
        raise bad(name, f"expected an array of {what}")
    if len(value) != n:
        raise bad(name, f"expected {n} values (one per token), got {len(value)}")


def parse_row(value: Any, name: str, vocab_size: int, max_seq_len: int) -> Row:
    r = obj(value, name)
    tokens = token_ids(r.get("tokens"), f"{name}.tokens", vocab_size)
    n = len(tokens)
    mask_raw = r.get("loss_mask")
    if not isinstance(mask_raw, list):
        raise bad(f"{name}.loss_mask", "expected an array of 0/1")
    if len(mask_raw) != n:
        raise bad(f"{name}.loss_mask", f"expected {n} values (one per token), got {len(mask_raw)}")
    if not all(type(v) is int and (v == 0 or v == 1) for v in mask_raw):
        for i, v in enumerate(mask_raw):
            if not _is_int(v) or v not in (0, 1):
                raise bad(f"{name}.loss_mask[{i}]", f"expected 0 or 1, got {v!r}")
    advantages = numbers(r.get("advantages"), f"{name}.advantages", n)
    weights = numbers(r.get("loss_weights"), f"{name}.loss_weights", n)
    behaviour = numbers(r.get("rollout_logprobs"), f"{name}.rollout_logprobs", n)

    starts_raw = r.get("segment_starts")
    starts: List[int] = [0]
    if starts_raw is not None:
        if not isinstance(starts_raw, list):
            raise bad(f"{name}.segment_starts", "expected an array of offsets")
        prev = -1
        for i, s in enumerate(starts_raw):
            s = integer(s, f"{name}.segment_starts[{i}]", lo=0, hi=n - 1)
            if s <= prev:
                raise bad(f"{name}.segment_starts[{i}]", "offsets must be strictly increasing")
            prev = s
        starts = sorted(set([0] + list(starts_raw)))
    segment = [0] * n
    if len(starts) > 1:
        seg = -1
        start_set = set(starts)
        for i in range(n):
            if i in start_set:
                seg += 1
            segment[i] = seg

    parent: Optional[List[int]] = None
    parent_raw = r.get("parent")
    pred = [0] * n
    positions = [0] * n
    if parent_raw is not None:
        per_token_list(parent_raw, f"{name}.parent", n, "parent indices")
        parent = []
        for i, p in enumerate(parent_raw):
            p = integer(p, f"{name}.parent[{i}]", lo=-1)
            if p >= i:
                raise bad(f"{name}.parent[{i}]", f"must point to an earlier token (< {i}) or be -1")
            if p >= 0 and segment[p] != segment[i]:
                raise bad(f"{name}.parent[{i}]", "points into another packed segment")
            parent.append(p)
            pred[i] = p
            positions[i] = 0 if p < 0 else positions[p] + 1
    elif len(starts) == 1:
        pred = list(range(-1, n - 1))
        positions = list(range(n))
    else:
        for i in range(n):
            first = i == 0 or segment[i] != segment[i - 1]
            pred[i] = -1 if first else i - 1
            positions[i] = 0 if first else positions[i - 1] + 1
    for i in (i for i, p in enumerate(pred) if p < 0):
        if mask_raw[i] == 1:
            raise bad(
                f"{name}.loss_mask[{i}]",
                "a trained token needs a preceding token (first token of a sequence/root)",
            )
    sequence_ids: Optional[List[int]] = None
    seq_raw = r.get("sequence_ids")
    if seq_raw is not None:
        per_token_list(seq_raw, f"{name}.sequence_ids", n, "sequence ids")
        if all(type(v) is int for v in seq_raw) and min(seq_raw) >= 0 and max(seq_raw) < n:
            sequence_ids = list(seq_raw)
        else:
            sequence_ids = [
                integer(v, f"{name}.sequence_ids[{i}]", lo=0, hi=n - 1)
                for i, v in enumerate(seq_raw)
            ]
    temperatures: Optional[List[float]] = None
    temps_raw = r.get("temperatures")
    if temps_raw is not None:
        temperatures = numbers(temps_raw, f"{name}.temperatures", n)
        for i, v in enumerate(temperatures):
            if v <= 0:
                raise bad(f"{name}.temperatures[{i}]", f"must be > 0 (a sampling temperature), got {v!r}")
    if n and max(positions) >= max_seq_len:
        raise bad(
            f"{name}.tokens",
            f"sequence position {max(positions)} exceeds the model's max_seq_len {max_seq_len}",
        )
    return Row(
        tokens,
        list(mask_raw),
        advantages,
        weights,
        behaviour,
        parent,
        starts,
        pred,
        positions,
        segment,
        sequence_ids,
        None,
        temperatures,
    )


def parse_forward_backward(
    body: Any, vocab_size: int, max_seq_len: int
) -> Tuple[List[Row], LossSpec, bool]:
    """Returns (rows, loss, return_logprobs)."""
    b = obj(body, "(body)")
    rows_raw = b.get("rows")
    if not isinstance(rows_raw, list) or not rows_raw:
        raise bad("rows", "expected a non-empty array of training rows")
    rows = [parse_row(r, f"rows[{i}]", vocab_size, max_seq_len) for i, r in enumerate(rows_raw)]
    loss = parse_loss(b.get("loss"))
    proximal = b.get("proximal_logprobs")
    if proximal is not None:
        if loss.old_logprobs != "recompute":
            raise bad(
                "proximal_logprobs",
                'only meaningful with loss.old_logprobs "recompute" (the ratio is taken against '
                "them)",
            )
        if not isinstance(proximal, list) or len(proximal) != len(rows):
            raise bad("proximal_logprobs", f"expected one array per row ({len(rows)})")
        for i, (row, values) in enumerate(zip(rows, proximal)):
            row.proximal = numbers(values, f"proximal_logprobs[{i}]", len(row.tokens))
    return rows, loss, boolean(b.get("return_logprobs", False), "return_logprobs")


# ---------------------------------------------------------------------------------------------
# generate and logprobs


@dataclass
class GenerateSpec:
    prompt_ids: List[int]
    max_tokens: int
    temperature: float
    top_p: float
    stop_ids: List[int]
    seed: Optional[int]
    stream: bool


def parse_generate(body: Any, vocab_size: int, max_seq_len: int) -> GenerateSpec:
    b = obj(body, "(body)")
    prompt = token_ids(b.get("prompt_ids"), "prompt_ids", vocab_size)
    if len(prompt) >= max_seq_len:
        raise bad(
            "prompt_ids",
            f"prompt of {len(prompt)} tokens leaves no room (max_seq_len {max_seq_len})",
        )
    max_tokens = integer(b.get("max_tokens"), "max_tokens", lo=1)
    temperature = num(b.get("temperature", 1.0), "temperature", lo=0)
    top_p = num(b.get("top_p", 1.0), "top_p", lo=0, hi=1, lo_open=True)
    stop_raw = b.get("stop_ids", [])
    if not isinstance(stop_raw, list):
        raise bad("stop_ids", "expected an array of token ids")
    stop_ids = []
    for i, s in enumerate(stop_raw):
        stop_ids.append(integer(s, f"stop_ids[{i}]", lo=0))
    seed = b.get("seed")
    if seed is not None:
        seed = integer(seed, "seed")
    stream = boolean(b.get("stream", False), "stream")
    return GenerateSpec(prompt, max_tokens, temperature, top_p, stop_ids, seed, stream)


def parse_logprobs(
    body: Any, vocab_size: int, max_seq_len: int
) -> Tuple[List[List[int]], float]:
    b = obj(body, "(body)")
    seqs = b.get("sequences")
    if not isinstance(seqs, list) or not seqs:
        raise bad("sequences", "expected a non-empty array of token id arrays")
    out = []
    for i, s in enumerate(seqs):
        ids = token_ids(s, f"sequences[{i}]", vocab_size)
        if len(ids) > max_seq_len:
            raise bad(f"sequences[{i}]", f"{len(ids)} tokens exceed max_seq_len {max_seq_len}")
        out.append(ids)
    temperature = num(b.get("temperature", 1.0), "temperature", lo=0, lo_open=True)
    return out, temperature


@dataclass
class ExportSpec:
    gguf: Optional[str]
    gguf_type: str
    hf: Optional[str]
    dtype: str
    tokenizer: Optional[str]


def parse_export(body: Any) -> ExportSpec:
    """Body of POST /export: `gguf` (+ `type`) and/or `hf` (+ `dtype`), `tokenizer`."""
    b = obj(body, "(body)")
    gguf = string(b["gguf"], "gguf") if b.get("gguf") is not None else None
    hf = string(b["hf"], "hf") if b.get("hf") is not None else None
    if gguf is None and hf is None:
        raise bad("gguf", "give gguf (a file to write) and/or hf (a directory)")
    gguf_type = b.get("type", "f32")
    if gguf_type not in ("f32", "f16", "q8_0"):
        raise bad("type", 'expected "f32", "f16" or "q8_0"')
    dtype = b.get("dtype", "bfloat16")
    if dtype not in ("float32", "bfloat16", "float16"):
        raise bad("dtype", 'expected "float32", "bfloat16" or "float16"')
    tokenizer = string(b["tokenizer"], "tokenizer") if b.get("tokenizer") is not None else None
    if gguf is not None and tokenizer is None:
        raise bad("tokenizer", "a GGUF needs the model's tokenizer: a dir with tokenizer.json")
    return ExportSpec(gguf, gguf_type, hf, dtype, tokenizer)


def parse_path(body: Any) -> str:
    b = obj(body, "(body)")
    return string(b.get("path"), "path")
