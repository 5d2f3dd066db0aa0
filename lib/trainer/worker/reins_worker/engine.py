"""The policy engine: one model + AdamW, guarded by one lock, behind the HTTP handlers.

Parameters and optimizer state stay float32 ("master weights"); `dtype` is the compute dtype
(autocast), so bf16 on a GPU trains stably and sampling and training run the same kernels.
"""

from __future__ import annotations

import contextlib
import inspect
import os
import random
import threading
from dataclasses import dataclass
from typing import Any, ContextManager, Dict, Iterator, List, Optional, Tuple

import numpy as np
import torch
from torch import nn
from torch.nn.utils.clip_grad import clip_grad_norm_

from .batch import Batch, build_batch, linear_batch
from .losses import LossInputs, policy_loss
from .hf_layout import LayoutError, is_hf_dir, is_qwen3_dir, load_hf_dir
from .model import Decoder, ModelConfig, build_builtin, parameter_count
from .policy_type import Policy
from .reference import ReferenceSlot, token_logprobs
from .validate import (
    InitSpec,
    LossSpec,
    OptimizerSpec,
    RequestError,
    Row,
    bad,
)

CHECKPOINT_FORMAT = "reins-trainer-checkpoint"
_DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


@dataclass
class Built:
    """A model built for `install`: weights on the CPU in float32, and what describes them."""

    model: nn.Module
    config: ModelConfig
    version: int
    source: Optional[str]
    kind: str  # "builtin" or "hf"


def not_initialized() -> RequestError:
    return RequestError(409, "not_initialized", "no policy loaded: POST /init first")


def _rng_states() -> Dict[str, Any]:
    """Every random generator a step may draw from: torch (CPU, and CUDA when present), Python's
    `random` and numpy's global one. Saved with a checkpoint so a resumed run draws what an
    uninterrupted one would have."""
    states: Dict[str, Any] = {
        "torch": torch.get_rng_state(),
        "python": random.getstate(),
        "numpy": np.random.get_state(),
    }
    if torch.cuda.is_available():
        states["cuda"] = torch.cuda.get_rng_state_all()
    return states


def _set_rng_states(states: Dict[str, Any]) -> None:
    torch.set_rng_state(states["torch"])
    random.setstate(states["python"])
    np.random.set_state(states["numpy"])
    if "cuda" in states and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(states["cuda"])


def _torch_load(path: str) -> Dict[str, Any]:
    kwargs: Dict[str, Any] = {"map_location": "cpu"}
    # torch 1.13's weights-only unpickler cannot read floats; from 2.x it reads our format.
    if int(torch.__version__.split(".")[0]) >= 2:
        kwargs["weights_only"] = True
    return torch.load(path, **kwargs)


class Engine:
    def __init__(self) -> None:
        self.lock = threading.RLock()
        self._gen_cond = threading.Condition()
        self._gen_active = 0
        self._weights_pending = 0
        self.model: Optional[Policy] = None
        self.config: Optional[ModelConfig] = None
        self.optimizer: Optional[torch.optim.Optimizer] = None
        self.optimizer_spec = OptimizerSpec()
        self.device = torch.device("cpu")
        self.dtype = torch.float32
        self.policy_version = 0
        self.optimizer_steps = 0
        self.model_kind: Optional[str] = None
        self.source: Optional[str] = None
        self.vocab_size = 0
        self.max_seq_len = 0
        self.reference = ReferenceSlot(0)  # π_ref of the KL penalty, held only once asked for

    # -- lifecycle -----------------------------------------------------------------------------

    @property
    def initialized(self) -> bool:
        return self.model is not None

    def _require(self) -> Policy:
        if self.model is None:
            raise not_initialized()
        return self.model

    def autocast(self) -> ContextManager[Any]:
        if self.dtype == torch.float32:
            return contextlib.nullcontext()
        return torch.autocast(device_type=self.device.type, dtype=self.dtype)

    def _make_optimizer(self, model: nn.Module, spec: OptimizerSpec) -> torch.optim.Optimizer:
        decay = [p for p in model.parameters() if p.requires_grad and p.dim() >= 2]
        no_decay = [p for p in model.parameters() if p.requires_grad and p.dim() < 2]
        groups = [
            {"params": decay, "weight_decay": spec.weight_decay},
            {"params": no_decay, "weight_decay": 0.0},
        ]
        kwargs: Dict[str, Any] = {"lr": spec.lr, "betas": tuple(spec.betas), "eps": spec.eps}
        fused_ok = "fused" in inspect.signature(torch.optim.AdamW).parameters
        if self.device.type == "cuda" and fused_ok:
            kwargs["fused"] = True
        return torch.optim.AdamW(groups, **kwargs)

    def resolve_device(self, name: Optional[str]) -> torch.device:
        try:
            device = torch.device(name or ("cuda" if torch.cuda.is_available() else "cpu"))
        except RuntimeError as e:
            raise bad("device", f"not a torch device: {e}") from e
        if device.type not in ("cpu", "cuda"):
            raise bad("device", f'expected "cpu" or "cuda[:index]", got {name!r}')
        if device.type == "cuda" and not torch.cuda.is_available():
            raise bad("device", "CUDA is not available on this worker")
        return device

    def build(self, spec: InitSpec) -> Built:
        """Builds (or reads) the model `spec` names, on the CPU in float32; touches nothing."""
        if spec.kind == "builtin":
            assert spec.config is not None
            config = ModelConfig(**spec.config)
            return Built(build_builtin(config, spec.seed), config, 0, None, "builtin")
        hf_dir = spec.path is not None and is_hf_dir(spec.path)
        if spec.path and hf_dir and (spec.kind == "checkpoint" or is_qwen3_dir(spec.path)):
            # A Qwen3 in the HF layout runs as the built-in decoder (no transformers needed);
            # other HF architectures still go through transformers.
            try:
                model, config = load_hf_dir(spec.path)
            except LayoutError as e:
                raise bad("model.path", str(e)) from e
            return Built(model, config, 0, spec.path, "builtin")
        if spec.kind == "checkpoint":
            assert spec.path is not None
            checkpoint = self._read_checkpoint(spec.path, "model.path")
            if checkpoint.get("model_kind") == "hf":
                return self._build_hf_checkpoint(spec.path, checkpoint)
            if checkpoint.get("model_kind") != "builtin":
                raise bad("model.path", f"unknown model kind {checkpoint.get('model_kind')!r}")
            try:
                config = ModelConfig(**checkpoint["config"])
                model = Decoder(config)
                model.load_state_dict(checkpoint["model"])
            except (KeyError, TypeError, RuntimeError) as e:
                message = f"checkpoint {spec.path} does not fit its config: {e}"
                raise bad("model.path", message) from e
            version = int(checkpoint.get("policy_version", 0))
            # A checkpoint of a built-in model is a built-in model (and saves as one).
            return Built(model, config, version, spec.path, "builtin")
        from .hf_model import load_hf  # optional dependency: transformers

        assert spec.path is not None
        model, config = load_hf(spec.path)
        return Built(model, config, 0, spec.path, "hf")

    def _build_hf_checkpoint(self, path: str, checkpoint: Dict[str, Any]) -> Built:
        """A checkpoint of a Hugging Face policy: the architecture comes from the model it was
        started from (`source`, an HF-layout directory or hub id), the weights from the file."""
        from .hf_model import load_hf  # optional dependency: transformers

        source = checkpoint.get("source")
        if not isinstance(source, str) or not source:
            raise bad("model.path", f"checkpoint {path} names no Hugging Face model to rebuild")
        model, config = load_hf(source)
        try:
            model.load_state_dict(checkpoint["model"])
        except (KeyError, RuntimeError) as e:
            raise bad("model.path", f"checkpoint {path} does not fit {source}: {e}") from e
        version = int(checkpoint.get("policy_version", 0))
        return Built(model, config, version, source, "hf")

    def init(self, spec: InitSpec) -> Dict[str, Any]:
        device = self.resolve_device(spec.device)
        built = self.build(spec)
        reference: Optional[ReferenceSlot] = None
        if spec.reference_path is not None:  # read and checked before anything changes
            reference = ReferenceSlot(built.version)
            checkpoint = self._read_checkpoint(spec.reference_path, "reference_path")
            reference.load(spec.reference_path, checkpoint, built.config)
        with self.weights_change(), self.lock:
            self.install(built, device, spec.dtype, spec.optimizer)
            if reference is not None:
                self.reference = reference.to(device, self.dtype)
            return self.state()

    def install(
        self,
        built: Built,
        device: torch.device,
        dtype_name: Optional[str],
        optimizer: OptimizerSpec,
    ) -> Dict[str, Any]:
        """Makes `built` the policy, with a fresh optimizer (weights_change and lock held)."""
        dtype_name = dtype_name or ("bfloat16" if device.type == "cuda" else "float32")
        self.device = device
        self.dtype = _DTYPES[dtype_name]
        self.model = built.model.to(device)
        if isinstance(self.model, Decoder):
            self.model.compute_dtype = None if self.dtype == torch.float32 else self.dtype
        self.config = built.config
        self.optimizer_spec = optimizer
        self.optimizer = self._make_optimizer(self.model, optimizer)
        self.policy_version = built.version
        self.optimizer_steps = 0
        self.model_kind = built.kind
        self.source = built.source
        self.vocab_size = built.config.vocab_size
        self.max_seq_len = built.config.max_seq_len
        self.reference = ReferenceSlot(built.version)
        return self.state()

    def state(self) -> Dict[str, Any]:
        with self.lock:
            if self.model is None or self.config is None:
                return {"initialized": False, "policy_version": self.policy_version}
            has_grad = any(p.grad is not None for p in self.model.parameters())
            return {
                "initialized": True,
                "model_kind": self.model_kind,
                "source": self.source,
                "config": self.config.to_dict(),
                "device": str(self.device),
                "dtype": str(self.dtype).replace("torch.", ""),
                "parameter_count": parameter_count(self.model),
                "policy_version": self.policy_version,
                "optimizer_steps": self.optimizer_steps,
                "optimizer": self.optimizer_spec.to_dict(),
                "has_grad": has_grad,
                "param_checksum": self._param_checksum(),
                "optimizer_checksum": self._optimizer_checksum(),
                "torch_version": torch.__version__,
                "reference": self.reference.describe(),
            }

    def _param_checksum(self) -> float:
        assert self.model is not None
        total = 0.0
        for p in self.model.parameters():
            d = p.detach().double()
            total += float(d.sum().item()) + float((d * d).sum().item())
        return total

    def _optimizer_checksum(self) -> float:
        assert self.optimizer is not None
        total = 0.0
        for state in self.optimizer.state.values():
            for v in state.values():
                if torch.is_tensor(v):
                    total += float(v.detach().double().abs().sum().item())
                else:
                    total += float(v)
        return total

    # -- checkpoints ---------------------------------------------------------------------------

    def _read_checkpoint(self, path: str, field: str) -> Dict[str, Any]:
        if not os.path.isfile(path):
            raise bad(field, f"no checkpoint file at {path}")
        try:
            data = _torch_load(path)
        except Exception as e:  # corrupt file or not a torch archive
            raise bad(field, f"cannot read checkpoint {path}: {e}") from e
        if not isinstance(data, dict) or data.get("format") != CHECKPOINT_FORMAT:
            raise bad(field, f"{path} is not a reins trainer checkpoint")
        return data

    def save(self, path: str) -> Dict[str, Any]:
        with self.lock:
            model = self._require()
            assert self.optimizer is not None and self.config is not None
            os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
            data = {
                "format": CHECKPOINT_FORMAT,
                "model_kind": self.model_kind,
                # An HF policy is rebuilt from the model it started from, then these weights.
                "source": self.source if self.model_kind == "hf" else None,
                "config": self.config.to_dict(),
                "model": {k: v.detach().cpu() for k, v in model.state_dict().items()},
                "optimizer": self.optimizer.state_dict(),
                "optimizer_config": self.optimizer_spec.to_dict(),
                "policy_version": self.policy_version,
                "optimizer_steps": self.optimizer_steps,
                "rng": _rng_states(),
            }
            tmp = f"{path}.tmp-{os.getpid()}"
            torch.save(data, tmp)
            os.replace(tmp, path)  # a crash mid-write never leaves a torn checkpoint
            return {"path": path, "policy_version": self.policy_version}

    def load(self, path: str) -> Dict[str, Any]:
        with self.weights_change(), self.lock:
            model = self._require()
            assert self.optimizer is not None and self.config is not None
            data = self._read_checkpoint(path, "path")
            if data.get("config") != self.config.to_dict():
                raise bad(
                    "path",
                    "checkpoint config differs from the loaded model; "
                    'use POST /init with {"kind": "checkpoint"} instead',
                )
            model.load_state_dict(data["model"])
            self.optimizer.load_state_dict(data["optimizer"])
            self.policy_version = int(data.get("policy_version", 0))
            self.optimizer_steps = int(data.get("optimizer_steps", 0))
            if "rng" in data:  # checkpoints written before RNG states were saved have none
                _set_rng_states(data["rng"])
            model.zero_grad(set_to_none=True)
            return {"path": path, "policy_version": self.policy_version}

    def export(self, spec: Any) -> Dict[str, Any]:
        """Writes the weights held now as a GGUF and/or an HF directory (reins_worker.export's
        writers), without a checkpoint round trip: what an engine sync needs each step."""
        from . import gguf_export, hf_layout  # writers: imported on first use

        with self.lock:
            model = self._require()
            if not isinstance(model, Decoder) or self.config is None:
                raise bad("(body)", "only the built-in decoder exports")
            state = {k: v.detach().float().cpu() for k, v in model.state_dict().items()}
            out: Dict[str, Any] = {"policy_version": self.policy_version}
            try:
                if spec.gguf:
                    out["gguf"] = gguf_export.export_gguf(
                        spec.gguf, state, self.config, spec.gguf_type, spec.tokenizer
                    )
                if spec.hf:
                    files = hf_layout.save_hf_dir(
                        spec.hf, state, self.config, spec.dtype, spec.tokenizer
                    )
                    out["hf"] = {"dir": spec.hf, "files": files, "dtype": spec.dtype}
            except (gguf_export.GGUFError, hf_layout.LayoutError, OSError) as e:
                raise bad("gguf" if spec.gguf else "hf", str(e)) from e
            return out

    # -- log-probs and training ----------------------------------------------------------------

    def _token_logprobs(
        self, logits: torch.Tensor, tokens: torch.Tensor, pred: torch.Tensor, entropy: bool
    ) -> Tuple[torch.Tensor, Optional[torch.Tensor]]:
        """logprob of tokens[b, i] under the logits at pred[b, i] (0 where pred < 0)."""
        logits = logits.float()
        lse = torch.logsumexp(logits, dim=-1)  # [B, T]
        b, t = tokens.shape
        bidx = torch.arange(b, device=tokens.device)[:, None].expand(b, t)
        pidx = pred.clamp(min=0)
        lp = logits[bidx, pidx, tokens] - lse[bidx, pidx]
        has_pred = pred >= 0
        lp = torch.where(has_pred, lp, torch.zeros_like(lp))
        ent: Optional[torch.Tensor] = None
        if entropy:
            with torch.no_grad():
                probs = torch.softmax(logits, dim=-1)
                pos_ent = lse - (probs * logits).sum(-1)
                ent = torch.where(has_pred, pos_ent[bidx, pidx], torch.zeros_like(lp))
        return lp, ent

    def logprobs(self, sequences: List[List[int]], temperature: float) -> Dict[str, Any]:
        with self.lock:
            model = self._require()
            tokens, positions = linear_batch(sequences, self.device)
            pred = positions - 1
            with torch.no_grad(), self.autocast():
                logits = model(tokens, positions, None, True)
            if temperature != 1.0:
                logits = logits.float() / temperature
            lp, ent = self._token_logprobs(logits, tokens, pred, True)
            assert ent is not None
            lps = lp.cpu().tolist()
            ents = ent.cpu().tolist()
            return {
                "logprobs": [lps[i][: len(s)] for i, s in enumerate(sequences)],
                "entropies": [ents[i][: len(s)] for i, s in enumerate(sequences)],
                "policy_version": self.policy_version,
            }

    def forward_backward(
        self, rows: List[Row], loss: LossSpec, return_logprobs: bool = False
    ) -> Dict[str, Any]:
        with self.lock:
            self._require()
            batch = build_batch(rows, self.device)
            out = self.forward_backward_batch(batch, loss, return_logprobs)
            if return_logprobs:
                lps = out.pop("_logprobs").tolist()
                out["logprobs"] = [lps[i][: len(r.tokens)] for i, r in enumerate(rows)]
            return out

    def forward_backward_batch(
        self, batch: Batch, spec: LossSpec, return_logprobs: bool = False
    ) -> Dict[str, Any]:
        """Accumulates d(Σ w·ℓ)/dθ into .grad; nothing changes when the loss is not finite."""
        model = self._require()
        b_idx, t_idx = batch.loss_mask.nonzero(as_tuple=True)
        p_idx = batch.pred[b_idx, t_idx]
        causal = batch.mask is None
        with self.autocast():
            if hasattr(model, "hidden"):
                h = model.hidden(batch.tokens, batch.positions, batch.mask, causal)
                # Logits only where a trained token is predicted.
                logits = model.head(h[b_idx, p_idx])
                anchor = h
            else:
                full = model(batch.tokens, batch.positions, batch.mask, causal)
                logits = full[b_idx, p_idx]
                anchor = full
        logits = logits.float()
        if batch.temperature is not None:
            # The behaviour logprob of a token sampled at temperature τ is that of softmax(z/τ):
            # recomputing it at τ = 1 would bias every importance weight of the call.
            logits = logits / batch.temperature[b_idx, t_idx][:, None]
        lse = torch.logsumexp(logits, dim=-1)
        targets = batch.tokens[b_idx, t_idx]
        new = logits.gather(1, targets[:, None]).squeeze(1) - lse
        with torch.no_grad():
            entropy = lse - (torch.softmax(logits, dim=-1) * logits).sum(-1)
        behaviour = batch.behaviour[b_idx, t_idx]
        # π_old of the ratio. "rollout": the behaviour policy μ. "recompute": the proximal policy
        # π_prox, the policy at the start of the update: the caller's `proximal_logprobs` (this
        # pass's own logprobs, returned by the update's first pass), or, without them, this
        # pass's logprobs, which are π_prox exactly when no optimizer step ran since.
        if spec.old_logprobs == "rollout":
            old = behaviour
        elif batch.proximal is not None:
            old = batch.proximal[b_idx, t_idx]
        else:
            old = new.detach()
        reference = None
        if spec.kl_coef > 0:
            ref_model = self.reference.ensure(model, self.optimizer_steps, self.policy_version)
            reference = token_logprobs(ref_model, batch, b_idx, t_idx, p_idx, self.autocast)
        seq = batch.sequence[b_idx, t_idx]
        if seq.numel():
            seq = torch.unique(seq, return_inverse=True)[1]
        inputs = LossInputs(
            new_logprobs=new,
            old_logprobs=old,
            behaviour_logprobs=behaviour,
            advantages=batch.advantages[b_idx, t_idx],
            weights=batch.weights[b_idx, t_idx],
            sequence_ids=seq,
            entropy=entropy,
            reference_logprobs=reference,
        )
        loss, metrics = policy_loss(spec, inputs)
        if new.numel() == 0:
            loss = loss + anchor.float().sum() * 0.0  # backward becomes a no-op, not an error
        value = float(loss.item())
        if value != value or value in (float("inf"), float("-inf")):
            raise RequestError(
                422, "non_finite_loss", f"loss is {value}; gradients left unchanged", "rows"
            )
        loss.backward()
        out: Dict[str, Any] = {
            "loss": value,
            "metrics": metrics,
            "policy_version": self.policy_version,
        }
        if return_logprobs:
            with torch.no_grad(), self.autocast():
                full_logits = model.head(anchor.detach()) if hasattr(model, "hidden") else anchor
            lp, _ = self._token_logprobs(full_logits.detach(), batch.tokens, batch.pred, False)
            # Trained tokens get the very values the loss used: sent back as proximal_logprobs,
            # they reproduce this pass's π_prox bit for bit.
            lp[b_idx, t_idx] = new.detach()
            out["_logprobs"] = lp.cpu()
        return out

    def optim_step(self) -> Dict[str, Any]:
        with self.weights_change() as waited, self.lock:
            model = self._require()
            assert self.optimizer is not None
            params = [p for p in model.parameters() if p.grad is not None]
            if not params:
                grad_norm = 0.0
            else:
                clip = self.optimizer_spec.grad_clip
                norm = clip_grad_norm_(
                    params, clip if clip > 0 else float("inf")
                )
                grad_norm = float(norm.item())
                if grad_norm != grad_norm or grad_norm == float("inf"):
                    model.zero_grad(set_to_none=True)
                    raise RequestError(
                        422, "non_finite_grad", f"gradient norm is {grad_norm}; step skipped"
                    )
            # Adam's first steps move every weight by about lr whatever the gradient's size
            # (its moment estimates are still empty): the warmup keeps them small.
            lr = self.optimizer_spec.lr_at(self.optimizer_steps)
            for group in self.optimizer.param_groups:
                group["lr"] = lr
            self.optimizer.step()
            model.zero_grad(set_to_none=True)
            self.policy_version += 1
            self.optimizer_steps += 1
            return {
                "grad_norm": grad_norm,
                "policy_version": self.policy_version,
                "waited_generations": waited["generations"],
            }

    def zero_grad(self) -> Dict[str, Any]:
        with self.lock:
            self._require().zero_grad(set_to_none=True)
            return {"ok": True, "policy_version": self.policy_version}

    def gradients(self, limit: int = 2_000_000) -> Dict[str, Any]:
        """The accumulated gradient, flattened (diagnostics and tests; tiny models only)."""
        with self.lock:
            model = self._require()
            total = sum(p.numel() for p in model.parameters())
            if total > limit:
                raise RequestError(
                    400, "too_large", f"model has {total} parameters (> {limit}); refused"
                )
            parts = [
                (p.grad if p.grad is not None else torch.zeros_like(p)).detach().float().flatten()
                for p in model.parameters()
            ]
            flat = torch.cat(parts)
            return {"gradient": flat.cpu().tolist(), "norm": float(flat.norm().item())}

    # -- one policy version per response -------------------------------------------------------

    def gen_try_start(self, n: int) -> bool:
        """Counts n rows as generating, unless a weight change waits (then admits none)."""
        with self._gen_cond:
            if self._weights_pending:
                return False
            self._gen_active += n
            return True

    def gen_finished(self, n: int) -> None:
        if n:
            with self._gen_cond:
                self._gen_active -= n
                self._gen_cond.notify_all()

    def generation_status(self) -> Dict[str, Any]:
        with self._gen_cond:
            return {"generating": self._gen_active, "weights_pending": self._weights_pending > 0}

    def wait_weights_idle(self) -> None:
        """Blocks while a weight change waits or runs (generation admits nothing then)."""
        with self._gen_cond:
            while self._weights_pending:
                self._gen_cond.wait()

    @contextlib.contextmanager
    def weights_change(self) -> Iterator[Dict[str, int]]:
        """Held by optim_step/load/init: waits for in-flight generations to finish (new ones
        queue meanwhile), so that no response mixes two policy versions."""
        waited = {"generations": 0}
        with self._gen_cond:
            self._weights_pending += 1
            waited["generations"] = self._gen_active
            try:
                while self._gen_active > 0:
                    self._gen_cond.wait()
            except BaseException:
                self._weights_pending -= 1
                self._gen_cond.notify_all()
                raise
        try:
            yield waited
        finally:
            with self._gen_cond:
                self._weights_pending -= 1
                self._gen_cond.notify_all()
