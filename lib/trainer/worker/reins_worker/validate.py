"""Request validation: every check runs before the model or optimizer is touched, and every
failure names the offending field (`rows[2].loss_mask`).

Defaults, enums and bounds come from the request contract (`contract.py`, emitted from
lib/schema/trainer.ts); what JSON Schema cannot say (heads dividing, one value per token, tree
parents) is checked here.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional, Sequence, Tuple

from . import contract
from .fields import (
    RequestError,
    is_int,
    bad,
    boolean,
    checked,
    field_or_default,
    integer,
    numbers,
    obj,
    one_of,
    string,
    token_ids,
)

# RequestError, bad and integer are re-exported: the engine, server and tools import them here.
__all__ = [
    "GenerateSpec",
    "InitSpec",
    "LossSpec",
    "OptimizerSpec",
    "RequestError",
    "Row",
    "bad",
    "integer",
    "parse_forward_backward",
    "parse_generate",
    "parse_init",
    "parse_logprobs",
    "parse_loss",
    "parse_model_config",
    "parse_optimizer",
    "parse_path",
    "parse_row",
    "per_token_list",
]


# ---------------------------------------------------------------------------------------------
# init


_OPTIMIZER = contract.properties(contract.node("init", "optimizer"))


@dataclass
class OptimizerSpec:
    lr: float = contract.default(_OPTIMIZER["lr"])
    betas: Sequence[float] = tuple(contract.default(_OPTIMIZER["betas"]))
    weight_decay: float = contract.default(_OPTIMIZER["weight_decay"])
    eps: float = contract.default(_OPTIMIZER["eps"])
    grad_clip: float = contract.default(_OPTIMIZER["grad_clip"])
    warmup_steps: int = contract.default(_OPTIMIZER["warmup_steps"])

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
    # A checkpoint whose weights are the frozen KL reference policy (None: the policy as loaded).
    reference_path: Optional[str] = None


_MODEL_CONFIG = contract.node("init", "model", "builtin", "config")


def parse_optimizer(value: Any, name: str = "optimizer") -> OptimizerSpec:
    if value is None:
        return OptimizerSpec()
    o = obj(value, name)
    spec = OptimizerSpec()
    for key, schema in _OPTIMIZER.items():
        if key not in o:
            continue
        if key == "betas":
            pair = schema["prefixItems"]
            betas = o["betas"]
            if not isinstance(betas, list) or len(betas) != len(pair):
                raise bad(f"{name}.betas", "expected two numbers [beta1, beta2]")
            spec.betas = tuple(
                checked(b, f"{name}.betas[{i}]", s) for i, (b, s) in enumerate(zip(betas, pair))
            )
        else:
            setattr(spec, key, checked(o[key], f"{name}.{key}", schema))
    return spec


def parse_model_config(value: Any, name: str) -> Dict[str, Any]:
    c = obj(value, name)
    out: Dict[str, Any] = {}
    fields = contract.properties(_MODEL_CONFIG)
    for key in contract.required(_MODEL_CONFIG):
        if key not in c:
            raise bad(f"{name}.{key}", "is required")
        out[key] = checked(c[key], f"{name}.{key}", fields[key])
    if out["n_heads"] % out["n_kv_heads"] != 0:
        raise bad(f"{name}.n_kv_heads", "must divide n_heads")
    head_dim = c.get("head_dim")
    if head_dim is not None:
        out["head_dim"] = checked(head_dim, f"{name}.head_dim", fields["head_dim"])
        if out["head_dim"] % 2:
            raise bad(f"{name}.head_dim", "must be even (RoPE rotates pairs)")
    else:
        if out["d_model"] % out["n_heads"] != 0:
            raise bad(f"{name}.n_heads", "must divide d_model (or give head_dim)")
        if (out["d_model"] // out["n_heads"]) % 2:
            raise bad(f"{name}.n_heads", "d_model / n_heads must be even (RoPE rotates pairs)")
    for key in ("tie_embeddings", "rope_theta", "qk_norm", "norm_eps"):
        out[key] = field_or_default(c, key, f"{name}.{key}", fields[key])
    out["rope_theta"] = float(out["rope_theta"])
    return out


def parse_init(body: Any) -> InitSpec:
    b = obj(body, "(body)")
    model = obj(b.get("model"), "model")
    kind = one_of(model.get("kind"), "model.kind", contract.enum(contract.node("init", "model")))
    config = None
    path = None
    seed = 0
    if kind == "builtin":
        config = parse_model_config(model.get("config"), "model.config")
        seed_schema = contract.node("init", "model", "builtin", "seed")
        seed = field_or_default(model, "seed", "model.seed", seed_schema)
    else:
        path_schema = contract.node("init", "model", kind, "path")
        path = checked(model.get("path"), "model.path", path_schema)
    optional: Dict[str, Optional[str]] = {}
    for key in ("dtype", "device", "reference_path"):
        value = b.get(key)
        optional[key] = None if value is None else checked(value, key, contract.node("init", key))
    return InitSpec(
        kind,
        config,
        seed,
        path,
        parse_optimizer(b.get("optimizer")),
        optional["dtype"],
        optional["device"],
        optional["reference_path"],
    )


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


_LOSS = contract.properties(contract.node("forward_backward", "loss"))


@dataclass
class LossSpec:
    """The `loss` of a forward_backward call; every field and default is the contract's."""

    kind: str
    clip_low: float = contract.default(_LOSS["clip_low"])
    clip_high: float = contract.default(_LOSS["clip_high"])
    dual_clip: Optional[float] = None
    gspo_clip_low: float = contract.default(_LOSS["gspo_clip_low"])
    gspo_clip_high: float = contract.default(_LOSS["gspo_clip_high"])
    tis_cap: Optional[float] = None
    # KL(π_θ ‖ π_ref) to the frozen reference policy: its weight (0 = off) and estimator.
    kl_coef: float = contract.default(_LOSS["kl_coef"])
    kl_estimator: str = contract.default(_LOSS["kl_estimator"])
    old_logprobs: str = contract.default(_LOSS["old_logprobs"])
    # What the rows' sequence ids stand for (GSPO): "sample" or "call". The rows carry the ids;
    # this names them, so that a result can say which sequence its ratio was taken over.
    gspo_sequence: str = contract.default(_LOSS["gspo_sequence"])
    # Training–inference mismatch masks (losses.behaviour_correction): [lo, hi] bands on the
    # sequence's geometric-mean ratio and on each token's ratio exp(old − behaviour).
    seq_is_band: Optional[Tuple[float, float]] = None
    token_ratio_band: Optional[Tuple[float, float]] = None


# Loss fields that are [lo, hi] bands (the contract's tuples), not scalars.
_BANDS = ("seq_is_band", "token_ratio_band")


def ratio_band(value: Any, name: str, schema: Dict[str, Any]) -> Tuple[float, float]:
    """A [lo, hi] ratio band: two numbers within the contract's bounds (0 <= lo, hi > 0) and
    lo <= hi (the zod refinement, which JSON Schema cannot state, restated here)."""
    if not isinstance(value, list) or len(value) != 2:
        raise bad(name, "expected [lo, hi]: two numbers")
    ends = schema["prefixItems"]
    lo = checked(value[0], f"{name}[0]", ends[0])
    hi = checked(value[1], f"{name}[1]", ends[1])
    if lo > hi:
        raise bad(name, f"the band's low end {lo} exceeds its high end {hi}")
    return (lo, hi)


def parse_loss(value: Any) -> LossSpec:
    o = obj(value, "loss")
    spec = LossSpec(checked(o.get("kind"), "loss.kind", _LOSS["kind"]))
    for key, schema in _LOSS.items():
        if key == "kind" or o.get(key) is None:
            continue
        if key in _BANDS:
            setattr(spec, key, ratio_band(o[key], f"loss.{key}", schema))
        else:
            setattr(spec, key, checked(o[key], f"loss.{key}", schema))
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
            if not is_int(v) or v not in (0, 1):
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
                raise bad(
                    f"{name}.temperatures[{i}]", f"must be > 0 (a sampling temperature), got {v!r}"
                )
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
    fields = contract.properties(contract.node("generate"))
    max_tokens = checked(b.get("max_tokens"), "max_tokens", fields["max_tokens"])
    temperature = float(field_or_default(b, "temperature", "temperature", fields["temperature"]))
    top_p = float(field_or_default(b, "top_p", "top_p", fields["top_p"]))
    stop_raw = b.get("stop_ids", contract.default(fields["stop_ids"]))
    if not isinstance(stop_raw, list):
        raise bad("stop_ids", "expected an array of token ids")
    stop_ids = []
    for i, s in enumerate(stop_raw):
        stop_ids.append(checked(s, f"stop_ids[{i}]", fields["stop_ids"]["items"]))
    seed = b.get("seed")
    if seed is not None:
        seed = checked(seed, "seed", fields["seed"])
    stream = field_or_default(b, "stream", "stream", fields["stream"])
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
    temperature_schema = contract.node("logprobs", "temperature")
    temperature = float(field_or_default(b, "temperature", "temperature", temperature_schema))
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
    if gguf_type not in ("f32", "f16", "q8_0", "q4_0"):
        raise bad("type", 'expected "f32", "f16", "q8_0" or "q4_0"')
    dtype = b.get("dtype", "bfloat16")
    if dtype not in ("float32", "bfloat16", "float16"):
        raise bad("dtype", 'expected "float32", "bfloat16" or "float16"')
    tokenizer = string(b["tokenizer"], "tokenizer") if b.get("tokenizer") is not None else None
    if gguf is not None and tokenizer is None:
        raise bad("tokenizer", "a GGUF needs the model's tokenizer: a dir with tokenizer.json")
    return ExportSpec(gguf, gguf_type, hf, dtype, tokenizer)


def parse_path(body: Any) -> str:
    b = obj(body, "(body)")
    return checked(b.get("path"), "path", contract.node("checkpoint", "path"))
