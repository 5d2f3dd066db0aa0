"""Per-token policy losses on flattened trained tokens.

Every function takes only the trained (loss_mask = 1) tokens, flattened, and returns
`Σ_t w_t · ℓ_t`: the caller's per-token weights already carry the global normalisation
(docs/architecture.md#algorithms), so summing this over micro-batches equals the loss of the
whole batch.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Dict, Optional

import torch

from .validate import LossSpec


@dataclass
class LossInputs:
    new_logprobs: torch.Tensor  # [N], carries the gradient
    old_logprobs: torch.Tensor  # [N], detached: the policy the ratio is taken against
    behaviour_logprobs: torch.Tensor  # [N]: what the sampler reported (TIS reference)
    advantages: torch.Tensor  # [N]
    weights: torch.Tensor  # [N]
    sequence_ids: torch.Tensor  # [N] long, 0..S-1: which sequence each token belongs to (GSPO)
    entropy: Optional[torch.Tensor] = None  # [N], metrics only


def k3_kl(new_logprobs: torch.Tensor, old_logprobs: torch.Tensor) -> torch.Tensor:
    """Per-token k3 estimate of KL(π_new ‖ π_old) (the GRPO form, as lib/algo's `k3Kl`):
    with x = old − new, exp(x) − x − 1. Non-negative; its gradient pulls π_new back to
    π_old."""
    x = old_logprobs - new_logprobs
    return torch.exp(x) - x - 1.0


def _clipped_surrogate(
    ratio: torch.Tensor,
    adv: torch.Tensor,
    low: float,
    high: float,
    dual_clip: Optional[float],
):
    unclipped = -adv * ratio
    clipped = -adv * torch.clamp(ratio, 1.0 - low, 1.0 + high)
    loss = torch.max(unclipped, clipped)
    was_clipped = clipped > unclipped
    if dual_clip is not None:
        # Dual clip bounds the loss of negative-advantage tokens whose ratio exploded.
        cap = -adv * dual_clip
        dual = (adv < 0) & (loss > cap)
        loss = torch.where(adv < 0, torch.min(loss, cap), loss)
        was_clipped = was_clipped | dual
    return loss, was_clipped


def policy_loss(spec: LossSpec, x: LossInputs):
    """Returns (Σ w·ℓ as a 0-d tensor, metrics dict of floats)."""
    n = x.new_logprobs.numel()
    new = x.new_logprobs
    old = x.old_logprobs.detach()
    log_ratio = new - old
    ratio = torch.exp(log_ratio)
    clipped = torch.zeros(n, dtype=torch.bool, device=new.device)
    if spec.kind == "ce":
        per_token = -new
    elif spec.kind == "ppo":
        per_token, clipped = _clipped_surrogate(
            ratio, x.advantages, spec.clip_low, spec.clip_high, spec.dual_clip
        )
    elif spec.kind == "gspo":
        # Sequence ratio s = exp(mean_t log r_t) over the sequence's trained tokens; every
        # token of the sequence carries s, so Σ_t w_t ℓ_t = ℓ_seq · Σ_t w_t.
        n_seq = int(x.sequence_ids.max().item()) + 1 if n else 0
        counts = torch.zeros(n_seq, device=new.device, dtype=new.dtype)
        counts.index_add_(0, x.sequence_ids, torch.ones_like(new))
        sums = torch.zeros(n_seq, device=new.device, dtype=new.dtype)
        sums = sums.index_add(0, x.sequence_ids, log_ratio)
        seq_ratio = torch.exp(sums / counts.clamp(min=1))
        ratio = seq_ratio[x.sequence_ids]
        per_token, clipped = _clipped_surrogate(
            ratio, x.advantages, spec.gspo_clip_low, spec.gspo_clip_high, spec.dual_clip
        )
    else:  # parse_loss already refused anything else
        raise ValueError(spec.kind)

    if spec.tis_cap is not None:
        tis = torch.clamp(torch.exp(old - x.behaviour_logprobs), max=spec.tis_cap).detach()
        per_token = per_token * tis
    kl = k3_kl(new, old)
    if spec.kl_coef > 0:
        per_token = per_token + spec.kl_coef * kl

    loss = (x.weights * per_token).sum()
    with torch.no_grad():
        metrics: Dict[str, float] = {
            "tokens": float(n),
            "clip_fraction": float(clipped.float().mean().item()) if n else 0.0,
            "ratio_mean": float(ratio.mean().item()) if n else 1.0,
            "ratio_max": float(ratio.max().item()) if n else 1.0,
            "ratio_min": float(ratio.min().item()) if n else 1.0,
            "kl": float(kl.mean().item()) if n else 0.0,
            "entropy": float(x.entropy.mean().item()) if (n and x.entropy is not None) else 0.0,
        }
    return loss, metrics
