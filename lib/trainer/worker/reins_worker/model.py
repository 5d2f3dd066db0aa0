"""The built-in policy: a small Qwen3-style decoder (RMSNorm, RoPE, GQA, SwiGLU, q/k norm).

One forward serves training, log-prob recomputation and cached generation: callers pass
explicit per-token positions and an explicit boolean attention mask, so that tree rows
(positions = depth, attend to ancestors only) and packed rows (positions reset, no attention
across segments) use the very same code as plain causal rows.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Any, Dict, List, NamedTuple, Optional, Tuple

import torch
import torch.nn.functional as F
from torch import nn

# Present from torch 2.0 on; torch 1.13 (Debian) takes the manual path below.
_SDPA = getattr(F, "scaled_dot_product_attention", None)


@dataclass
class ModelConfig:
    vocab_size: int
    d_model: int
    n_layers: int
    n_heads: int
    n_kv_heads: int
    d_ff: int
    max_seq_len: int
    tie_embeddings: bool = True
    rope_theta: float = 10000.0
    qk_norm: bool = True
    norm_eps: float = 1e-6
    head_dim: Optional[int] = None

    @property
    def resolved_head_dim(self) -> int:
        return self.head_dim if self.head_dim else self.d_model // self.n_heads

    def to_dict(self) -> Dict[str, Any]:
        return asdict(self)


class RMSNorm(nn.Module):
    def __init__(self, dim: int, eps: float) -> None:
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        # Normalise in float32 so that bf16 runs keep the same statistics as fp32 ones.
        dtype = x.dtype
        xf = x.float()
        xf = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + self.eps)
        return (xf * self.weight.float()).to(dtype)


def rope_cos_sin(
    positions: torch.Tensor, head_dim: int, theta: float, dtype: torch.dtype
) -> Tuple[torch.Tensor, torch.Tensor]:
    """cos/sin tables for arbitrary per-token positions, shape [B, 1, T, head_dim]."""
    inv_freq = 1.0 / (
        theta
        ** (torch.arange(0, head_dim, 2, device=positions.device, dtype=torch.float32) / head_dim)
    )
    freqs = positions.to(torch.float32)[..., None] * inv_freq  # [B, T, hd/2]
    emb = torch.cat([freqs, freqs], dim=-1)[:, None, :, :]
    return emb.cos().to(dtype), emb.sin().to(dtype)


def _rotate_half(x: torch.Tensor) -> torch.Tensor:
    half = x.shape[-1] // 2
    return torch.cat([-x[..., half:], x[..., :half]], dim=-1)


def apply_rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    return x * cos + _rotate_half(x) * sin


def attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    mask: Optional[torch.Tensor],
    is_causal: bool,
) -> torch.Tensor:
    """q [B,H,T,D], k/v [B,H,S,D], mask bool [B,1,T,S] (True = may attend) or None."""
    if _SDPA is not None:
        if mask is None:
            return _SDPA(q, k, v, is_causal=is_causal)
        return _SDPA(q, k, v, attn_mask=mask)
    scale = 1.0 / math.sqrt(q.shape[-1])
    scores = torch.matmul(q.float(), k.float().transpose(-1, -2)) * scale
    if mask is None and is_causal:
        t, s = q.shape[-2], k.shape[-2]
        mask = torch.ones(t, s, dtype=torch.bool, device=q.device).tril(s - t)[None, None]
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    probs = torch.softmax(scores, dim=-1)
    return torch.matmul(probs, v.float()).to(q.dtype)


class KVCache:
    """Preallocated per-layer key/value buffers for batched generation."""

    def __init__(
        self,
        config: ModelConfig,
        batch: int,
        length: int,
        device: torch.device,
        dtype: torch.dtype,
    ) -> None:
        shape = (batch, config.n_kv_heads, length, config.resolved_head_dim)
        self.k: List[torch.Tensor] = [
            torch.zeros(shape, device=device, dtype=dtype) for _ in range(config.n_layers)
        ]
        self.v: List[torch.Tensor] = [
            torch.zeros(shape, device=device, dtype=dtype) for _ in range(config.n_layers)
        ]
        self.length = 0


class LayerInputs(NamedTuple):
    """What every layer reads besides the residual stream, built once per forward."""

    cos: torch.Tensor
    sin: torch.Tensor
    mask: Optional[torch.Tensor]
    is_causal: bool
    cache: Optional[KVCache]


class Attention(nn.Module):
    def __init__(self, config: ModelConfig) -> None:
        super().__init__()
        hd = config.resolved_head_dim
        self.n_heads = config.n_heads
        self.n_kv_heads = config.n_kv_heads
        self.head_dim = hd
        self.q_proj = nn.Linear(config.d_model, config.n_heads * hd, bias=False)
        self.k_proj = nn.Linear(config.d_model, config.n_kv_heads * hd, bias=False)
        self.v_proj = nn.Linear(config.d_model, config.n_kv_heads * hd, bias=False)
        self.o_proj = nn.Linear(config.n_heads * hd, config.d_model, bias=False)
        self.q_norm: Optional[RMSNorm] = RMSNorm(hd, config.norm_eps) if config.qk_norm else None
        self.k_norm: Optional[RMSNorm] = RMSNorm(hd, config.norm_eps) if config.qk_norm else None

    def forward(self, x: torch.Tensor, inputs: LayerInputs, layer: int) -> torch.Tensor:
        b, t, _ = x.shape
        q = self.q_proj(x).view(b, t, self.n_heads, self.head_dim)
        k = self.k_proj(x).view(b, t, self.n_kv_heads, self.head_dim)
        v = self.v_proj(x).view(b, t, self.n_kv_heads, self.head_dim)
        if self.q_norm is not None and self.k_norm is not None:
            q = self.q_norm(q)
            k = self.k_norm(k)
        # Rotate in the projections' dtype (bf16 under autocast) rather than promoting to fp32.
        cos, sin = inputs.cos.to(q.dtype), inputs.sin.to(q.dtype)
        q = apply_rope(q.transpose(1, 2), cos, sin)
        k = apply_rope(k.transpose(1, 2), cos, sin)
        v = v.transpose(1, 2)
        cache = inputs.cache
        if cache is not None:
            start = cache.length
            cache.k[layer][:, :, start : start + t] = k
            cache.v[layer][:, :, start : start + t] = v
            k = cache.k[layer][:, :, : start + t]
            v = cache.v[layer][:, :, : start + t]
        if self.n_kv_heads != self.n_heads:
            rep = self.n_heads // self.n_kv_heads
            s = k.shape[2]
            k = k[:, :, None].expand(b, self.n_kv_heads, rep, s, self.head_dim)
            k = k.reshape(b, self.n_heads, s, self.head_dim)
            v = v[:, :, None].expand(b, self.n_kv_heads, rep, s, self.head_dim)
            v = v.reshape(b, self.n_heads, s, self.head_dim)
        out = attention(q, k, v, inputs.mask, inputs.is_causal)
        return self.o_proj(out.transpose(1, 2).reshape(b, t, self.n_heads * self.head_dim))


class MLP(nn.Module):
    def __init__(self, config: ModelConfig) -> None:
        super().__init__()
        self.gate_proj = nn.Linear(config.d_model, config.d_ff, bias=False)
        self.up_proj = nn.Linear(config.d_model, config.d_ff, bias=False)
        self.down_proj = nn.Linear(config.d_ff, config.d_model, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


class Block(nn.Module):
    def __init__(self, config: ModelConfig) -> None:
        super().__init__()
        self.input_norm = RMSNorm(config.d_model, config.norm_eps)
        self.attn = Attention(config)
        self.post_attn_norm = RMSNorm(config.d_model, config.norm_eps)
        self.mlp = MLP(config)

    def forward(self, x: torch.Tensor, inputs: LayerInputs, layer: int) -> torch.Tensor:
        x = x + self.attn(self.input_norm(x), inputs, layer)
        return x + self.mlp(self.post_attn_norm(x))


class Decoder(nn.Module):
    """Qwen3-style decoder; `forward` returns logits [B, T, vocab]."""

    def __init__(self, config: ModelConfig) -> None:
        super().__init__()
        self.config = config
        self.embed = nn.Embedding(config.vocab_size, config.d_model)
        self.layers = nn.ModuleList([Block(config) for _ in range(config.n_layers)])
        self.norm = RMSNorm(config.d_model, config.norm_eps)
        # Set by the engine under mixed precision: the residual stream then runs in this dtype
        # (bf16), halving the memory traffic of the element-wise ops; norms still reduce in fp32.
        self.compute_dtype: Optional[torch.dtype] = None
        self.lm_head: Optional[nn.Linear] = (
            None
            if config.tie_embeddings
            else nn.Linear(config.d_model, config.vocab_size, bias=False)
        )
        self._init_weights()

    def _init_weights(self) -> None:
        # Scaled output projections keep the residual stream's variance flat with depth.
        out_std = 0.02 / math.sqrt(2 * max(1, self.config.n_layers))
        for name, p in self.named_parameters():
            if name.endswith("norm.weight"):
                continue
            if name.endswith("o_proj.weight") or name.endswith("down_proj.weight"):
                nn.init.normal_(p, mean=0.0, std=out_std)
            else:
                nn.init.normal_(p, mean=0.0, std=0.02)

    def hidden(
        self,
        tokens: torch.Tensor,
        positions: torch.Tensor,
        mask: Optional[torch.Tensor] = None,
        is_causal: bool = False,
        cache: Optional[KVCache] = None,
    ) -> torch.Tensor:
        """Final-norm hidden states [B, T, d_model] (training applies the head only where a
        token is trained: prompts cost no LM-head FLOPs)."""
        x = self.embed(tokens)
        if self.compute_dtype is not None:
            x = x.to(self.compute_dtype)
        cos, sin = rope_cos_sin(
            positions, self.config.resolved_head_dim, self.config.rope_theta, torch.float32
        )
        inputs = LayerInputs(cos, sin, mask, is_causal, cache)
        for i, layer in enumerate(self.layers):
            x = layer(x, inputs, i)
        if cache is not None:
            cache.length += tokens.shape[1]
        return self.norm(x)

    def head(self, h: torch.Tensor) -> torch.Tensor:
        weight = self.embed.weight if self.lm_head is None else self.lm_head.weight
        return F.linear(h, weight)

    def forward(self, *args: Any, **kwargs: Any) -> torch.Tensor:
        """Logits [B, T, vocab]: `hidden` (same arguments) through the LM head."""
        return self.head(self.hidden(*args, **kwargs))

    def new_cache(self, batch: int, length: int, dtype: torch.dtype) -> KVCache:
        return KVCache(self.config, batch, length, self.embed.weight.device, dtype)


def build_builtin(config: ModelConfig, seed: int) -> Decoder:
    """Builds the decoder on the CPU in float32 under `seed`, so that CPU and GPU runs start
    from bit-identical weights."""
    devices: List[int] = []
    with torch.random.fork_rng(devices=devices):
        torch.manual_seed(seed)
        return Decoder(config)


def parameter_count(model: nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())


def non_embedding_matmul_params(config: ModelConfig) -> int:
    """Parameters touched by a matmul per token (all but the embedding lookup; the LM head
    counts even when tied), used for FLOPs estimates."""
    hd = config.resolved_head_dim
    attn = config.d_model * hd * (2 * config.n_heads + 2 * config.n_kv_heads)
    mlp = 3 * config.d_model * config.d_ff
    return config.n_layers * (attn + mlp) + config.d_model * config.vocab_size
