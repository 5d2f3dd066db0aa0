"""The frozen reference policy π_ref of the KL penalty (`loss.kl_coef` > 0).

Nothing is held until a call asks for the penalty: the slot then copies the policy as `/init`
loaded it (refused once the policy has moved, since those weights are gone), or reads the
checkpoint `/init` named in `reference_path` (e.g. the run's first checkpoint when resuming).
The copy never trains: no gradient, no optimizer, the policy's compute dtype.
"""

from __future__ import annotations

import copy
from typing import Any, Callable, ContextManager, Dict, Optional

import torch
from torch import nn

from .batch import Batch
from .model import Decoder, ModelConfig
from .policy_type import Policy
from .validate import RequestError, bad


def _frozen(model: nn.Module) -> nn.Module:
    model.eval()
    for p in model.parameters():
        p.requires_grad_(False)
        p.grad = None
    return model


def token_logprobs(
    model: Policy,
    batch: Batch,
    b_idx: torch.Tensor,
    t_idx: torch.Tensor,
    p_idx: torch.Tensor,
    autocast: Callable[[], ContextManager[Any]],
) -> torch.Tensor:
    """log π(token at [b, t] | its predecessor at [b, p]) for the trained tokens, without a
    gradient, computed the way the engine computes the policy's."""
    causal = batch.mask is None
    with torch.no_grad(), autocast():
        if hasattr(model, "hidden"):
            h = model.hidden(batch.tokens, batch.positions, batch.mask, causal)
            logits = model.head(h[b_idx, p_idx])
        else:
            logits = model(batch.tokens, batch.positions, batch.mask, causal)[b_idx, p_idx]
    logits = logits.float()
    targets = batch.tokens[b_idx, t_idx]
    return logits.gather(1, targets[:, None]).squeeze(1) - torch.logsumexp(logits, dim=-1)


class ReferenceSlot:
    """Holds π_ref for one installed policy (a fresh slot per `/init`)."""

    def __init__(self, installed_version: int) -> None:
        self.installed_version = installed_version
        self.model: Optional[nn.Module] = None
        self.source: Optional[str] = None

    def load(self, path: str, checkpoint: Dict[str, Any], config: ModelConfig) -> None:
        """π_ref from a checkpoint written by `POST /save` (its config must be the policy's),
        on the CPU until {@link to} places it."""
        if checkpoint.get("model_kind") != "builtin":
            raise bad("reference_path", "only built-in model checkpoints can be a reference")
        if checkpoint.get("config") != config.to_dict():
            raise bad("reference_path", f"{path} holds another architecture than the policy")
        model = Decoder(config)
        try:
            model.load_state_dict(checkpoint["model"])
        except (KeyError, RuntimeError) as e:
            raise bad("reference_path", f"checkpoint {path} does not fit its config: {e}") from e
        self.model = _frozen(model)
        self.source = path

    def to(self, device: torch.device, dtype: torch.dtype) -> "ReferenceSlot":
        """Places π_ref on the policy's device, computing in the policy's dtype."""
        if self.model is not None:
            self.model = self.model.to(device)
            if isinstance(self.model, Decoder):
                self.model.compute_dtype = None if dtype == torch.float32 else dtype
        return self

    def ensure(self, policy: nn.Module, optimizer_steps: int, policy_version: int) -> nn.Module:
        """π_ref, copying the policy the first time when it has not moved since `/init`."""
        if self.model is not None:
            return self.model
        if optimizer_steps > 0 or policy_version != self.installed_version:
            raise RequestError(
                409,
                "no_reference",
                "loss.kl_coef: the KL penalty needs the reference policy, and the policy has "
                "moved since /init (its starting weights are gone): POST /init again with "
                "reference_path naming a checkpoint of the reference",
                "loss.kl_coef",
            )
        self.model = _frozen(copy.deepcopy(policy))
        self.source = "init"
        return self.model

    def describe(self) -> Optional[str]:
        """Where π_ref came from (`init` or a checkpoint path); None while none is held."""
        return self.source
