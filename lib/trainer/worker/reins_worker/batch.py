"""Turns validated training rows into padded tensors: tokens, positions, attention mask and
the predecessor index of every token (the position whose logits predict it)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import List, Optional

import torch

from .validate import Row


@dataclass
class Batch:
    tokens: torch.Tensor  # [B, T] long, right-padded with 0
    positions: torch.Tensor  # [B, T] long (depth for tree rows, reset per packed segment)
    mask: Optional[torch.Tensor]  # [B, 1, T, T] bool (True = may attend); None = plain causal
    pred: torch.Tensor  # [B, T] long, -1 where nothing predicts the token
    loss_mask: torch.Tensor  # [B, T] bool
    advantages: torch.Tensor  # [B, T] float32
    weights: torch.Tensor  # [B, T] float32
    behaviour: torch.Tensor  # [B, T] float32
    sequence: torch.Tensor  # [B, T] long: global sequence id (row, segment or sequence_ids)
    # [B, T] float32: π_prox given by the caller (`proximal_logprobs`), or None.
    proximal: Optional[torch.Tensor] = None
    # [B, T] float32: sampling temperature per token (1 elsewhere), or None when all are 1.
    temperature: Optional[torch.Tensor] = None


def _row_mask(row: Row, width: int) -> torch.Tensor:
    n = len(row.tokens)
    m = torch.zeros(width, width, dtype=torch.bool)
    if row.parent is not None:
        # A token sees exactly its ancestors and itself (rows are in topological order).
        for i, p in enumerate(row.parent):
            if p >= 0:
                m[i] = m[p]
            m[i, i] = True
    else:
        seg = torch.tensor(row.segment, dtype=torch.long)
        causal = torch.ones(n, n, dtype=torch.bool).tril()
        m[:n, :n] = causal & (seg[:, None] == seg[None, :])
    # Padding queries attend to themselves only, so that no softmax row is empty.
    idx = torch.arange(n, width)
    m[idx, idx] = True
    return m


def build_batch(rows: List[Row], device: torch.device) -> Batch:
    b = len(rows)
    width = max(len(r.tokens) for r in rows)

    def pad(values: List[List], fill, dtype: torch.dtype) -> torch.Tensor:
        out = torch.full((b, width), fill, dtype=dtype)
        for i, v in enumerate(values):
            out[i, : len(v)] = torch.tensor(v, dtype=dtype)
        return out

    tokens = pad([r.tokens for r in rows], 0, torch.long)
    positions = pad([r.positions for r in rows], 0, torch.long)
    pred = pad([r.pred for r in rows], -1, torch.long)
    loss_mask = pad([r.loss_mask for r in rows], 0, torch.long).bool()
    advantages = pad([r.advantages for r in rows], 0.0, torch.float32)
    weights = pad([r.loss_weights for r in rows], 0.0, torch.float32)
    behaviour = pad([r.rollout_logprobs for r in rows], 0.0, torch.float32)
    seg = pad([r.sequence for r in rows], 0, torch.long)
    n_seg = int(seg.max().item()) + 1
    sequence = torch.arange(b, dtype=torch.long)[:, None] * n_seg + seg
    proximal: Optional[torch.Tensor] = None
    if rows[0].proximal is not None:  # parse_forward_backward gives all rows or none
        proximal = pad([r.proximal or [] for r in rows], 0.0, torch.float32).to(device)
    temperature: Optional[torch.Tensor] = None
    if any(r.temperatures is not None for r in rows):
        per_row = [r.temperatures or [1.0] * len(r.tokens) for r in rows]
        temperature = pad(per_row, 1.0, torch.float32).to(device)
    mask: Optional[torch.Tensor] = None
    if not all(r.linear for r in rows):
        mask = torch.stack([_row_mask(r, width) for r in rows])[:, None].to(device)
    return Batch(
        tokens.to(device),
        positions.to(device),
        mask,
        pred.to(device),
        loss_mask.to(device),
        advantages.to(device),
        weights.to(device),
        behaviour.to(device),
        sequence.to(device),
        proximal,
        temperature,
    )


def linear_batch(sequences: List[List[int]], device: torch.device):
    """Right-padded causal batch for log-prob recomputation: (tokens, positions)."""
    b = len(sequences)
    width = max(len(s) for s in sequences)
    tokens = torch.zeros(b, width, dtype=torch.long)
    for i, s in enumerate(sequences):
        tokens[i, : len(s)] = torch.tensor(s, dtype=torch.long)
    positions = torch.arange(width, dtype=torch.long)[None].expand(b, width).contiguous()
    return tokens.to(device), positions.to(device)
