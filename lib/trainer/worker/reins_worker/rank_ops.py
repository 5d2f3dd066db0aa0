"""What every data-parallel rank does for one call, rank 0 included: its share of a
`forward_backward` (each row one micro-batch), the agreement and the gradient all-reduce, the
optimizer step, and receiving rank 0's weights and optimizer state.

Exactness: the rows' `loss_weights` carry the whole batch's normalisation (computed before the
rows were split), so each rank's gradient is its part of one sum, and the all-reduce (a SUM, no
division by the world size) gives every rank the single-process gradient. Every rank then takes
the same AdamW step on the same gradient, so their weights stay identical.
"""

from __future__ import annotations

import os
from dataclasses import asdict
from typing import Any, Dict, List, Optional, Sequence, Tuple

import torch
import torch.distributed as dist
from torch import nn

from .batch import build_batch
from .dist_env import Groups, collective
from .engine import Built, Engine
from .model import Decoder, ModelConfig
from .validate import LossSpec, OptimizerSpec, RequestError, Row

_BUCKET = 1 << 25  # elements per all-reduce (128 MiB of float32)


def row_to_json(row: Row) -> Dict[str, Any]:
    return asdict(row)


def row_from_json(data: Dict[str, Any]) -> Row:
    return Row(**data)


def loss_from_json(data: Dict[str, Any]) -> LossSpec:
    return LossSpec(**data)


def merge_metrics(parts: Sequence[Dict[str, float]]) -> Dict[str, float]:
    """Metrics of several micro-batches as if they were one: token-weighted means, max of
    maxima, min of minima."""
    tokens = sum(p["tokens"] for p in parts)
    live = [p for p in parts if p["tokens"] > 0]
    if not live:
        return {
            "tokens": 0.0,
            "clip_fraction": 0.0,
            "ratio_mean": 1.0,
            "ratio_max": 1.0,
            "ratio_min": 1.0,
            "kl": 0.0,
            "kl_ref_mean": 0.0,
            "entropy": 0.0,
            "is_masked_tokens": 0.0,
            "is_masked_sequences": 0.0,
            "is_ess": 1.0,
        }

    def mean(key: str) -> float:
        return sum(p[key] * p["tokens"] for p in live) / tokens

    return {
        "tokens": float(tokens),
        "clip_fraction": mean("clip_fraction"),
        "ratio_mean": mean("ratio_mean"),
        "ratio_max": max(p["ratio_max"] for p in live),
        "ratio_min": min(p["ratio_min"] for p in live),
        "kl": mean("kl"),
        "kl_ref_mean": mean("kl_ref_mean"),
        "entropy": mean("entropy"),
        # Counts add up; the ESS of the parts is their token-weighted mean (not the ESS of the
        # union, which needs Σw and Σw²: close when the parts weigh alike).
        "is_masked_tokens": sum(p.get("is_masked_tokens", 0.0) for p in live),
        "is_masked_sequences": sum(p.get("is_masked_sequences", 0.0) for p in live),
        "is_ess": sum(p.get("is_ess", 1.0) * p["tokens"] for p in live) / tokens,
    }


def lpt_assign(lengths: Sequence[int], world: int) -> List[int]:
    """Longest rows first onto the least-loaded rank (for callers that send no `rank_of_row`;
    the TypeScript client plans with Karmarkar–Karp, lib/batching/plan.ts)."""
    loads = [0] * world
    out = [0] * len(lengths)
    for i in sorted(range(len(lengths)), key=lambda i: (-lengths[i], i)):
        r = min(range(world), key=lambda r: (loads[r], r))
        out[i] = r
        loads[r] += lengths[i]
    return out


class RankOps:
    def __init__(self, engine: Engine, groups: Groups) -> None:
        self.engine = engine
        self.groups = groups
        self.env = groups.env

    # -- collectives ---------------------------------------------------------------------------

    def _group(self) -> Any:
        return self.groups.for_device(self.engine.device)

    def _comm(self, t: torch.Tensor) -> Tuple[torch.Tensor, bool]:
        """The tensor a collective runs on: itself, or a CPU copy when gloo carries CUDA data."""
        if t.is_cuda and self._group() is self.groups.ctrl:
            return t.cpu(), True
        return t, False

    def all_reduce(self, t: torch.Tensor, what: str, op: Any = None) -> None:
        buf, copied = self._comm(t)
        reduce_op = op if op is not None else dist.ReduceOp.SUM
        collective(what, lambda: dist.all_reduce(buf, op=reduce_op, group=self._group()))
        if copied:
            t.copy_(buf)

    def broadcast(self, t: torch.Tensor, what: str) -> None:
        buf, copied = self._comm(t)
        collective(what, lambda: dist.broadcast(buf, src=0, group=self._group()))
        if copied:
            t.copy_(buf)

    def agree(self, failed: bool, what: str) -> bool:
        """True when any rank failed (a gloo MAX over one flag per rank)."""
        flag = torch.tensor([1.0 if failed else 0.0])
        collective(
            what,
            lambda: dist.all_reduce(flag, op=dist.ReduceOp.MAX, group=self.groups.ctrl),
        )
        return bool(flag.item() > 0)

    def broadcast_object(self, value: Any, what: str) -> Any:
        box = [value]
        collective(what, lambda: dist.broadcast_object_list(box, src=0, group=self.groups.ctrl))
        return box[0]

    # -- init and load ---------------------------------------------------------------------------

    def init_message(
        self, built: Built, device_type: str, dtype: Optional[str], optimizer: OptimizerSpec
    ) -> Dict[str, Any]:
        """What the other ranks need to build the same architecture (rank 0 only)."""
        hf_config = None
        if built.kind == "hf":
            from .hf_model import hf_config_dict

            hf_config = hf_config_dict(built.model)
        return {
            "op": "init",
            "kind": built.kind,
            "config": built.config.to_dict(),
            "hf_config": hf_config,
            "version": built.version,
            "source": built.source,
            "device_type": device_type,
            "dtype": dtype,
            "optimizer": optimizer.to_dict(),
        }

    def build_from_message(self, msg: Dict[str, Any]) -> Built:
        """Rank > 0: the architecture rank 0 built, with placeholder weights (rank 0's arrive by
        broadcast, so no rank reads a file but rank 0)."""
        if msg["kind"] == "hf":
            from .hf_model import hf_from_config

            model, config = hf_from_config(msg["hf_config"])
        else:
            config = ModelConfig(**msg["config"])
            model = Decoder(config)
        return Built(model, config, int(msg["version"]), msg["source"], msg["kind"])

    def device_of(self, device_type: str) -> torch.device:
        if device_type == "cuda":
            return torch.device("cuda", self.env.local_rank)
        return torch.device("cpu")

    def broadcast_model(self) -> None:
        model = self.engine._require()
        seen = set()
        for t in list(model.parameters()) + list(model.buffers()):
            if id(t) in seen:
                continue
            seen.add(id(t))
            self.broadcast(t.data, "weights broadcast")

    def broadcast_optimizer(self) -> None:
        """Rank 0's AdamW state (moments, step counts, hyper-parameters) onto every rank."""
        opt = self.engine.optimizer
        assert opt is not None
        params: List[nn.Parameter] = [p for g in opt.param_groups for p in g["params"]]
        meta: Any = None
        if self.env.rank == 0:
            entries = []
            for p in params:
                state = opt.state.get(p, {})
                entry = {}
                for key, v in state.items():
                    if torch.is_tensor(v):
                        place = "cpu" if v.device.type == "cpu" else "param"
                        entry[key] = ["t", list(v.shape), str(v.dtype).replace("torch.", ""), place]
                    else:
                        entry[key] = ["v", v]
                entries.append(entry)
            groups = [{k: v for k, v in g.items() if k != "params"} for g in opt.param_groups]
            meta = {"entries": entries, "groups": groups}
        meta = self.broadcast_object(meta, "optimizer state broadcast")
        for p, entry in zip(params, meta["entries"]):
            state = opt.state[p] if self.env.rank == 0 else {}
            for key in entry:  # rank 0's order: checksums sum in the same order
                kind = entry[key]
                if kind[0] == "v":
                    state[key] = kind[1]
                    continue
                if self.env.rank == 0:
                    t = state[key]
                else:
                    dev = torch.device("cpu") if kind[3] == "cpu" else p.device
                    t = torch.zeros(kind[1], dtype=getattr(torch, kind[2]), device=dev)
                if t.device.type == "cpu" and p.device.type == "cuda":
                    moved = t.to(p.device)
                    self.broadcast(moved, "optimizer state broadcast")
                    t.copy_(moved)
                else:
                    self.broadcast(t, "optimizer state broadcast")
                state[key] = t
            if self.env.rank != 0:
                if state:
                    opt.state[p] = state
                else:
                    opt.state.pop(p, None)
        for group, values in zip(opt.param_groups, meta["groups"]):
            group.update(values)

    # -- training --------------------------------------------------------------------------------

    def forward_backward(
        self, rows: List[Row], index: List[int], loss: LossSpec, want_lp: bool
    ) -> Dict[str, Any]:
        """This rank's rows (global indices `index`), each its own micro-batch; then every rank
        agrees that all rows succeeded and sums the call's gradients. A failure anywhere leaves
        every rank's gradients as they were before the call."""
        engine = self.engine
        model = engine._require()
        params = [p for p in model.parameters() if p.requires_grad]
        saved = [p.grad for p in params]
        for p in params:
            p.grad = None
        error: Optional[RequestError] = None
        loss_sum = 0.0
        metrics: List[Dict[str, float]] = []
        logprobs: List[List[float]] = []
        try:
            for i, row in zip(index, rows):
                try:
                    batch = build_batch([row], engine.device)
                    out = engine.forward_backward_batch(batch, loss, want_lp)
                except RequestError as e:
                    where = f"rows[{i}]"
                    raise RequestError(e.status, e.code, f"{where}: {e.message}", where) from e
                loss_sum += out["loss"]
                metrics.append(out["metrics"])
                if want_lp:
                    logprobs.append(out["_logprobs"][0, : len(row.tokens)].tolist())
        except RequestError as e:
            error = e
        except Exception as e:  # an engine bug on this rank: every rank must still agree
            error = RequestError(500, "internal", f"rank {self.env.rank}: {e}")
        failed = self.agree(error is not None, "forward_backward agreement")
        if failed:
            for p, g in zip(params, saved):
                p.grad = g
            raise error or RequestError(
                422, "failed_elsewhere", "another rank failed this call; gradients unchanged"
            )
        self._reduce_grads(params)
        for p, g in zip(params, saved):
            if g is not None:
                p.grad = g if p.grad is None else p.grad.add_(g)
        return {"loss": loss_sum, "metrics": merge_metrics(metrics), "logprobs": logprobs}

    def _reduce_grads(self, params: List[nn.Parameter]) -> None:
        """SUM of this call's gradients over ranks; a parameter no rank touched keeps no grad."""
        has = torch.tensor([0.0 if p.grad is None else 1.0 for p in params])
        collective(
            "gradient all-reduce",
            lambda: dist.all_reduce(has, op=dist.ReduceOp.MAX, group=self.groups.ctrl),
        )
        live = [p for p, h in zip(params, has.tolist()) if h > 0]
        for p in live:
            if p.grad is None:
                p.grad = torch.zeros_like(p)
        buckets: List[List[nn.Parameter]] = []
        size = 0
        for p in live:
            if not buckets or size + p.numel() > _BUCKET:
                buckets.append([])
                size = 0
            buckets[-1].append(p)
            size += p.numel()
        for bucket in buckets:
            grads = [q.grad for q in bucket]
            flat = torch.cat([g.reshape(-1) for g in grads if g is not None])
            self.all_reduce(flat, "gradient all-reduce")
            offset = 0
            for g in grads:
                assert g is not None
                n = g.numel()
                g.copy_(flat[offset : offset + n].view_as(g))
                offset += n

    def state(self) -> Dict[str, Any]:
        engine = self.engine
        out: Dict[str, Any] = {
            "rank": self.env.rank,
            "pid": os.getpid(),
            "device": str(engine.device),
        }
        if engine.initialized:
            out["param_checksum"] = engine._param_checksum()
            out["optimizer_checksum"] = engine._optimizer_checksum()
            out["policy_version"] = engine.policy_version
        return out


def check_rank_of_row(value: Any, n_rows: int, world: int) -> Optional[List[int]]:
    """`rank_of_row`: one rank index per row, each below the world size (None when absent)."""
    from .validate import bad, integer

    if value is None:
        return None
    if not isinstance(value, list) or len(value) != n_rows:
        raise bad("rank_of_row", f"expected one rank per row ({n_rows})")
    out = []
    for i, v in enumerate(value):
        r = integer(v, f"rank_of_row[{i}]", lo=0)
        if r >= world:
            raise bad(f"rank_of_row[{i}]", f"rank {r} does not exist (the worker has {world})")
        out.append(r)
    return out
