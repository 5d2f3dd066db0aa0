"""Per-token policy losses on flattened trained tokens, as two registries: `LOSSES` (the
policy-gradient term by `loss.kind`) and `KL_ESTIMATORS` (the per-token estimate of
KL(π_θ ‖ π_ref) by `loss.kl_estimator`). Adding a loss is one registered function.

Every function takes only the trained (loss_mask = 1) tokens, flattened; `policy_loss` returns
`Σ_t w_t · ℓ_t`: the caller's per-token weights already carry the global normalisation
(docs/architecture.md#algorithms), so summing this over micro-batches equals the loss of the
whole batch.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Dict, Optional, Tuple

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
    # [N]: the frozen reference policy's logprobs (KL penalty); present when kl_coef > 0.
    reference_logprobs: Optional[torch.Tensor] = None


# A loss: (spec, inputs, log_ratio = new − old) → (per-token ℓ, per-token ratio, clipped flags).
LossFn = Callable[
    [LossSpec, LossInputs, torch.Tensor], Tuple[torch.Tensor, torch.Tensor, torch.Tensor]
]
LOSSES: Dict[str, LossFn] = {}

# A KL estimator: (new logprobs, reference logprobs) → per-token estimate of KL(π_θ ‖ π_ref).
KlEstimator = Callable[[torch.Tensor, torch.Tensor], torch.Tensor]
KL_ESTIMATORS: Dict[str, KlEstimator] = {}


def register_loss(name: str) -> Callable[[LossFn], LossFn]:
    """Registers a loss under its `loss.kind` name (the contract's enum must list it)."""

    def add(fn: LossFn) -> LossFn:
        LOSSES[name] = fn
        return fn

    return add


def register_kl(name: str) -> Callable[[KlEstimator], KlEstimator]:
    """Registers a KL estimator under its `loss.kl_estimator` name."""

    def add(fn: KlEstimator) -> KlEstimator:
        KL_ESTIMATORS[name] = fn
        return fn

    return add


@register_kl("k1")
def kl_k1(new_logprobs: torch.Tensor, ref_logprobs: torch.Tensor) -> torch.Tensor:
    """k1 = −x = log π_θ − log π_ref (x = ref − new): unbiased, can be negative."""
    return new_logprobs - ref_logprobs


@register_kl("k2")
def kl_k2(new_logprobs: torch.Tensor, ref_logprobs: torch.Tensor) -> torch.Tensor:
    """k2 = x² / 2: biased, non-negative, low variance."""
    x = ref_logprobs - new_logprobs
    return 0.5 * x * x


@register_kl("k3")
def k3_kl(new_logprobs: torch.Tensor, old_logprobs: torch.Tensor) -> torch.Tensor:
    """Per-token k3 estimate of KL(π_new ‖ π_old) (the GRPO form, as lib/algo's `k3Kl`):
    with x = old − new, exp(x) − x − 1. Unbiased and non-negative; its gradient pulls π_new
    back to π_old."""
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


@register_loss("ce")
def cross_entropy(spec: LossSpec, x: LossInputs, log_ratio: torch.Tensor):
    """Supervised fine-tuning: ℓ = −log π_θ (no ratio, nothing clipped)."""
    n = x.new_logprobs.numel()
    clipped = torch.zeros(n, dtype=torch.bool, device=x.new_logprobs.device)
    return -x.new_logprobs, torch.exp(log_ratio), clipped


@register_loss("ppo")
def ppo(spec: LossSpec, x: LossInputs, log_ratio: torch.Tensor):
    """PPO/GRPO clipped surrogate on the token ratio r_t = π_θ / π_old."""
    ratio = torch.exp(log_ratio)
    loss, clipped = _clipped_surrogate(
        ratio, x.advantages, spec.clip_low, spec.clip_high, spec.dual_clip
    )
    return loss, ratio, clipped


@register_loss("gspo")
def gspo(spec: LossSpec, x: LossInputs, log_ratio: torch.Tensor):
    """GSPO: the sequence ratio s = exp(mean_t log r_t) over the sequence's trained tokens; every
    token of the sequence carries s, so Σ_t w_t ℓ_t = ℓ_seq · Σ_t w_t."""
    new = x.new_logprobs
    n = new.numel()
    n_seq = int(x.sequence_ids.max().item()) + 1 if n else 0
    counts = torch.zeros(n_seq, device=new.device, dtype=new.dtype)
    counts.index_add_(0, x.sequence_ids, torch.ones_like(new))
    sums = torch.zeros(n_seq, device=new.device, dtype=new.dtype)
    sums = sums.index_add(0, x.sequence_ids, log_ratio)
    ratio = torch.exp(sums / counts.clamp(min=1))[x.sequence_ids]
    loss, clipped = _clipped_surrogate(
        ratio, x.advantages, spec.gspo_clip_low, spec.gspo_clip_high, spec.dual_clip
    )
    return loss, ratio, clipped


def behaviour_correction(
    spec: LossSpec, old: torch.Tensor, behaviour: torch.Tensor, sequence_ids: torch.Tensor
) -> Tuple[Optional[torch.Tensor], Dict[str, float]]:
    """The detached per-token weight that corrects for the sampler μ (the engine) not being the
    trainer's π_old, with ρ_t = exp(old_t − behaviour_t):

    - `token_ratio_band` [lo, hi] (IcePop): a token with ρ_t outside the band gets weight 0;
    - `seq_is_band` [lo, hi] (masked sequence-level IS): a sequence whose geometric-mean ratio
      g = exp(mean_t log ρ_t) over its trained tokens lies outside the band has every token
      weighted 0;
    - `tis_cap` c (TIS): the tokens the masks keep weigh min(ρ_t, c); without it, 1.

    Returns (None, metrics) when no correction is configured (weight 1 everywhere). Metrics:
    `is_masked_tokens` and `is_masked_sequences` (counts), `is_ess` = (Σw)² / (n Σw²) over the
    n trained tokens (1: every token weighs the same; 0: every token masked).
    """
    n = old.numel()
    metrics = {"is_masked_tokens": 0.0, "is_masked_sequences": 0.0, "is_ess": 1.0}
    if spec.tis_cap is None and spec.seq_is_band is None and spec.token_ratio_band is None:
        return None, metrics
    log_rho = (old - behaviour).detach()
    masked = torch.zeros(n, dtype=torch.bool, device=old.device)
    if spec.token_ratio_band is not None:
        lo, hi = spec.token_ratio_band
        rho = torch.exp(log_rho)
        masked = masked | (rho < lo) | (rho > hi)
    if spec.seq_is_band is not None and n:
        lo, hi = spec.seq_is_band
        n_seq = int(sequence_ids.max().item()) + 1
        counts = torch.zeros(n_seq, device=old.device, dtype=old.dtype)
        counts.index_add_(0, sequence_ids, torch.ones_like(old))
        sums = torch.zeros(n_seq, device=old.device, dtype=old.dtype)
        sums.index_add_(0, sequence_ids, log_rho)
        g = torch.exp(sums / counts.clamp(min=1))
        outside = ((g < lo) | (g > hi)) & (counts > 0)
        metrics["is_masked_sequences"] = float(outside.sum().item())
        masked = masked | outside[sequence_ids]
    if spec.tis_cap is not None:
        weight = torch.clamp(torch.exp(log_rho), max=spec.tis_cap)
    else:
        weight = torch.ones_like(old)
    weight = torch.where(masked, torch.zeros_like(weight), weight)
    metrics["is_masked_tokens"] = float(masked.sum().item())
    if n:
        square = float((weight * weight).sum().item())
        metrics["is_ess"] = float(weight.sum().item()) ** 2 / (n * square) if square > 0 else 0.0
    return weight, metrics


def policy_loss(spec: LossSpec, x: LossInputs) -> Tuple[torch.Tensor, Dict[str, float]]:
    """Returns (Σ w·ℓ as a 0-d tensor, metrics dict of floats), with
    ℓ = c · LOSSES[kind] + kl_coef · KL_ESTIMATORS[kl_estimator](π_θ, π_ref), c the behaviour
    correction (`behaviour_correction`: TIS, IcePop and masked sequence-level IS; 1 without)."""
    n = x.new_logprobs.numel()
    new = x.new_logprobs
    old = x.old_logprobs.detach()
    per_token, ratio, clipped = LOSSES[spec.kind](spec, x, new - old)

    correction, correction_metrics = behaviour_correction(
        spec, old, x.behaviour_logprobs, x.sequence_ids
    )
    if correction is not None:
        per_token = per_token * correction
    kl_ref: Optional[torch.Tensor] = None
    if spec.kl_coef > 0:
        if x.reference_logprobs is None:
            raise ValueError("kl_coef > 0 needs the reference policy's logprobs")
        kl_ref = KL_ESTIMATORS[spec.kl_estimator](new, x.reference_logprobs.detach())
        per_token = per_token + spec.kl_coef * kl_ref

    loss = (x.weights * per_token).sum()
    with torch.no_grad():
        metrics: Dict[str, float] = {
            "tokens": float(n),
            "clip_fraction": float(clipped.float().mean().item()) if n else 0.0,
            "ratio_mean": float(ratio.mean().item()) if n else 1.0,
            "ratio_max": float(ratio.max().item()) if n else 1.0,
            "ratio_min": float(ratio.min().item()) if n else 1.0,
            "kl": float(k3_kl(new, old).mean().item()) if n else 0.0,
            "kl_ref_mean": float(kl_ref.mean().item()) if (n and kl_ref is not None) else 0.0,
            "entropy": float(x.entropy.mean().item()) if (n and x.entropy is not None) else 0.0,
            **correction_metrics,
        }
    return loss, metrics
