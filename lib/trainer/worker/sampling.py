"""Token sampling with temperature and nucleus (top-p), per-request seeded generators.

The reported logprob is that of the sampled token under the distribution actually sampled
from: softmax(logits / temperature), renormalised over the nucleus when top_p < 1. Greedy
decoding (temperature 0) reports the logprob under the untempered softmax(logits), since the
degenerate greedy distribution would always give 0.
"""

from __future__ import annotations

import random
from typing import Optional, Tuple

import torch


def make_generator(seed: Optional[int], device: torch.device) -> torch.Generator:
    g = torch.Generator(device=device)
    # Unseeded requests still get their own stream, so that they never perturb seeded ones.
    g.manual_seed((seed if seed is not None else random.getrandbits(62)) % (2**63))
    return g


def sample_token(
    logits: torch.Tensor,
    temperature: float,
    top_p: float,
    generator: torch.Generator,
) -> Tuple[int, float]:
    """logits: float32 [V]. Returns (token id, logprob under the sampling distribution)."""
    if temperature == 0:
        token = int(torch.argmax(logits).item())
        return token, float(torch.log_softmax(logits, dim=-1)[token].item())
    logp = torch.log_softmax(logits / temperature, dim=-1)
    if top_p < 1.0:
        sorted_logp, order = torch.sort(logp, descending=True)
        cum = torch.cumsum(sorted_logp.exp(), dim=-1)
        # Keep the smallest prefix whose mass reaches top_p (always at least one token).
        keep = (cum - sorted_logp.exp()) < top_p
        keep[0] = True
        kept_logp = sorted_logp[keep]
        kept_logp = kept_logp - torch.logsumexp(kept_logp, dim=-1)
        idx = int(torch.multinomial(kept_logp.exp(), 1, generator=generator).item())
        return int(order[keep][idx].item()), float(kept_logp[idx].item())
    token = int(torch.multinomial(logp.exp(), 1, generator=generator).item())
    return token, float(logp[token].item())
