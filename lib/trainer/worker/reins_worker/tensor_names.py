"""The built-in decoder's tensor names in each format it is written in: one table, so that a
tensor is added or renamed in one place for every format.

- `hf`: Hugging Face's Qwen3 names (`hf_layout`: safetensors directories for transformers,
  vLLM and SGLang);
- `gguf`: llama.cpp's `qwen3` names, as its convert_hf_to_gguf.py writes them (`gguf_export`).
"""

from __future__ import annotations

from typing import List, Literal, Tuple

from .model import ModelConfig

TensorFormat = Literal["hf", "gguf"]
# The column of each format in the rows below (column 0 is our state_dict name).
_COLUMN = {"hf": 1, "gguf": 2}

# Per layer: (our name within `layers.N.`, HF name within `model.layers.N.`, GGUF name within
# `blk.N.`), in the order the exports write them.
_LAYER_TENSORS = [
    ("input_norm.weight", "input_layernorm.weight", "attn_norm.weight"),
    ("attn.q_proj.weight", "self_attn.q_proj.weight", "attn_q.weight"),
    ("attn.k_proj.weight", "self_attn.k_proj.weight", "attn_k.weight"),
    ("attn.v_proj.weight", "self_attn.v_proj.weight", "attn_v.weight"),
    ("attn.o_proj.weight", "self_attn.o_proj.weight", "attn_output.weight"),
    ("attn.q_norm.weight", "self_attn.q_norm.weight", "attn_q_norm.weight"),
    ("attn.k_norm.weight", "self_attn.k_norm.weight", "attn_k_norm.weight"),
    ("post_attn_norm.weight", "post_attention_layernorm.weight", "ffn_norm.weight"),
    ("mlp.gate_proj.weight", "mlp.gate_proj.weight", "ffn_gate.weight"),
    ("mlp.up_proj.weight", "mlp.up_proj.weight", "ffn_up.weight"),
    ("mlp.down_proj.weight", "mlp.down_proj.weight", "ffn_down.weight"),
]
_LAYER_PREFIX = ("layers", "model.layers", "blk")
_EMBED = ("embed.weight", "model.embed_tokens.weight", "token_embd.weight")
_NORM = ("norm.weight", "model.norm.weight", "output_norm.weight")
# Only an untied model has an LM head of its own.
_LM_HEAD = ("lm_head.weight", "lm_head.weight", "output.weight")


def tensor_names(config: ModelConfig, fmt: TensorFormat) -> List[Tuple[str, str]]:
    """(our state_dict name, the format's name) for every tensor of a model with `config`: the
    embedding, each layer's tensors, the final norm and, unless tied, the LM head."""
    col = _COLUMN[fmt]
    pairs = [(_EMBED[0], _EMBED[col])]
    for i in range(config.n_layers):
        ours, theirs = f"{_LAYER_PREFIX[0]}.{i}.", f"{_LAYER_PREFIX[col]}.{i}."
        pairs += [(ours + row[0], theirs + row[col]) for row in _LAYER_TENSORS]
    pairs.append((_NORM[0], _NORM[col]))
    if not config.tie_embeddings:
        pairs.append((_LM_HEAD[0], _LM_HEAD[col]))
    return pairs
