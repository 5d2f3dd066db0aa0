"""Hugging Face causal LMs behind the built-in decoder's interface (optional: `transformers`).

Linear rows use the model's own causal attention with explicit position ids. Tree and packed
rows pass a 4-D additive attention mask, which recent `transformers` releases accept for
Llama/Qwen-family models.
"""

from __future__ import annotations

from dataclasses import dataclass
import json
from typing import Any, Dict, Optional, Tuple

import torch
from torch import nn

from .model import ModelConfig
from .validate import bad


@dataclass
class HFCache:
    past: Any
    length: int
    valid: Optional[torch.Tensor] = None


class HFPolicy(nn.Module):
    def __init__(self, model: nn.Module, config: ModelConfig) -> None:
        super().__init__()
        self.model: Any = model  # a transformers causal LM (its config and methods are read)
        self.config = config

    def forward(
        self,
        tokens: torch.Tensor,
        positions: torch.Tensor,
        mask: Optional[torch.Tensor] = None,
        is_causal: bool = False,
        cache: Optional[HFCache] = None,
    ) -> torch.Tensor:
        if cache is not None:
            assert mask is not None
            # Generation masks only hide left padding: the last query row lists valid keys.
            attention_mask = mask[:, 0, -1, :].long()
            out = self.model(
                input_ids=tokens,
                position_ids=positions,
                attention_mask=attention_mask,
                past_key_values=cache.past,
                use_cache=True,
            )
            cache.past = out.past_key_values
            cache.length += tokens.shape[1]
            return out.logits
        if mask is None:
            return self.model(input_ids=tokens, position_ids=positions).logits
        dtype = next(self.model.parameters()).dtype
        additive = torch.zeros(mask.shape, dtype=dtype, device=mask.device)
        additive = additive.masked_fill(~mask, torch.finfo(dtype).min)
        return self.model(input_ids=tokens, position_ids=positions, attention_mask=additive).logits

    def new_cache(self, batch: int, length: int, dtype: torch.dtype) -> HFCache:
        return HFCache(past=None, length=0)


def _transformers() -> Any:
    try:
        import transformers  # type: ignore
    except ImportError:
        raise bad(
            "model.kind", '"hf" needs the transformers package: pip install transformers'
        ) from None
    return transformers


def load_hf(path: str) -> Tuple[nn.Module, ModelConfig]:
    transformers = _transformers()
    try:
        model = transformers.AutoModelForCausalLM.from_pretrained(path, torch_dtype=torch.float32)
    except Exception as e:
        raise bad("model.path", f"cannot load a Hugging Face model from {path}: {e}") from e
    config = model_config_of(model.config)
    return HFPolicy(model, config), config


def hf_config_dict(policy: nn.Module) -> Dict[str, Any]:
    """The JSON form of an HF policy's config (what `hf_from_config` rebuilds it from)."""
    assert isinstance(policy, HFPolicy)
    return json.loads(policy.model.config.to_json_string(use_diff=False))


def hf_from_config(config: Dict[str, Any]) -> Tuple[nn.Module, ModelConfig]:
    """An HF causal LM built from its config with random weights (no files, no download): the
    other data-parallel ranks before rank 0's weights arrive, and the GPU check's Qwen3 model."""
    transformers = _transformers()
    fields = dict(config)
    model_type = fields.pop("model_type")
    try:
        hf_config = transformers.AutoConfig.for_model(model_type, **fields)
        model = transformers.AutoModelForCausalLM.from_config(hf_config, torch_dtype=torch.float32)
    except Exception as e:
        raise bad("model.config", f"cannot build a Hugging Face {model_type} model: {e}") from e
    model_config = model_config_of(hf_config)
    return HFPolicy(model, model_config), model_config


def model_config_of(c: Any) -> ModelConfig:
    n_heads = int(getattr(c, "num_attention_heads", 1))
    return ModelConfig(
        vocab_size=int(c.vocab_size),
        d_model=int(getattr(c, "hidden_size", 0)),
        n_layers=int(getattr(c, "num_hidden_layers", 0)),
        n_heads=n_heads,
        n_kv_heads=int(getattr(c, "num_key_value_heads", n_heads) or n_heads),
        d_ff=int(getattr(c, "intermediate_size", 0)),
        max_seq_len=int(getattr(c, "max_position_embeddings", 32768)),
        tie_embeddings=bool(getattr(c, "tie_word_embeddings", False)),
        rope_theta=float(getattr(c, "rope_theta", 10000.0)),
        head_dim=getattr(c, "head_dim", None),
    )
