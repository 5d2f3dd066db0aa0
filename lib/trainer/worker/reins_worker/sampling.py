"""Token sampling with temperature and nucleus (top-p), per-request seeded generators.

The reported logprob is that of the sampled token under the distribution actually sampled
from: softmax(logits / temperature), renormalised over the nucleus when top_p < 1. Greedy
decoding (temperature 0) reports the logprob under the untempered softmax(logits), since the
degenerate greedy distribution would always give 0.

A decode step samples every live row at once (`sample_rows`): the softmax, the nucleus and the
gathers are batched, each row draws from its own generator, and nothing reads a value back to
the host, so the step pays one device sync (its caller's single `.tolist()`), not one per row.
"""

from __future__ import annotations

import random
from typing import List, Optional, Sequence, Tuple

import torch


def make_generator(seed: Optional[int], device: torch.device) -> torch.Generator:
    g = torch.Generator(device=device)
    # Unseeded requests still get their own stream, so that they never perturb seeded ones.
    g.manual_seed((seed if seed is not None else random.getrandbits(62)) % (2**63))
    return g


def sample_rows(
    logits: torch.Tensor,
    temperatures: Sequence[float],
    top_ps: Sequence[float],
    generators: Sequence[torch.Generator],
) -> Tuple[torch.Tensor, torch.Tensor]:
    """logits: float32 [B, V]. Returns (token ids [B] long, logprobs [B] float32), both on
    the logits' device; row b uses temperatures[b], top_ps[b] and generators[b]."""
    b = logits.shape[0]
    device = logits.device
    greedy = [t == 0 for t in temperatures]
    temps = torch.tensor([1.0 if g else t for g, t in zip(greedy, temperatures)], device=device)
    logp = torch.log_softmax(logits / temps[:, None], dim=-1)
    nucleus = [i for i in range(b) if not greedy[i] and top_ps[i] < 1.0]
    kept: Optional[torch.Tensor] = None
    order: Optional[torch.Tensor] = None
    if nucleus:
        sub = logp[nucleus]
        sorted_logp, order = torch.sort(sub, dim=-1, descending=True)
        probs = sorted_logp.exp()
        top_p = torch.tensor([top_ps[i] for i in nucleus], device=device)[:, None]
        # Keep the smallest prefix whose mass reaches top_p (always at least one token).
        keep = (torch.cumsum(probs, dim=-1) - probs) < top_p
        keep[:, 0] = True
        kept = torch.where(keep, sorted_logp, torch.full_like(sorted_logp, float("-inf")))
        kept = kept - torch.logsumexp(kept, dim=-1, keepdim=True)
    slot = {row: k for k, row in enumerate(nucleus)}
    argmax = torch.argmax(logits, dim=-1, keepdim=True)  # [B, 1]
    # One-element index tensors and gathers throughout: nothing here reads a value back.
    tokens: List[torch.Tensor] = []
    lps: List[torch.Tensor] = []
    for i in range(b):
        if greedy[i]:
            tok = argmax[i]
            lp = logp[i].gather(0, tok)
        elif i in slot:
            assert kept is not None and order is not None
            k = slot[i]
            idx = torch.multinomial(kept[k].exp(), 1, generator=generators[i])
            tok = order[k].gather(0, idx)
            lp = kept[k].gather(0, idx)
        else:
            tok = torch.multinomial(logp[i].exp(), 1, generator=generators[i])
            lp = logp[i].gather(0, tok)
        tokens.append(tok)
        lps.append(lp)
    return torch.cat(tokens), torch.cat(lps)
