"""The Hugging Face layout of a Qwen3 checkpoint, for the built-in decoder, with torch alone.

A directory with `config.json` (`Qwen3ForCausalLM`, model_type `qwen3`), `model.safetensors`
(or shards and `model.safetensors.index.json`) under HF's tensor names, and the tokenizer's
files. `save_hf_dir` writes our decoder that way, so `transformers`, vLLM and SGLang load it
elsewhere; `load_hf_dir` reads such a directory (a downloaded Qwen3-0.6B, 1.7B, … or our own)
into the built-in decoder, so no `transformers` is needed to train a real Qwen3.

The built-in decoder computes what HF's `modeling_qwen3.py` computes, so the weights map one
to one, with no permutation: RoPE rotates split halves (`rotate_half`, cos/sin of
`cat(freqs, freqs)`), q_norm/k_norm are RMSNorms over each head's `head_dim` applied before
RoPE, KV head j serves query heads j·g … (j+1)·g−1 (`repeat_kv`), the scale is head_dim^-0.5,
the MLP is down(silu(gate(x)) · up(x)), and a tied model has no `lm_head.weight`.
"""

from __future__ import annotations

import json
import os
import shutil
from typing import Any, Dict, List, Optional, Tuple

import torch

from . import safetensors_io as st
from .model import Decoder, ModelConfig
from .tensor_names import tensor_names

CONFIG_FILE = "config.json"
# What a tokenizer directory may hold; whichever exist are copied alongside the weights.
TOKENIZER_FILES = (
    "tokenizer.json",
    "tokenizer_config.json",
    "special_tokens_map.json",
    "vocab.json",
    "merges.txt",
    "added_tokens.json",
    "generation_config.json",
)
_DTYPES = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16}
# Buffers some older exports carry; they are recomputed, never learned.
_IGNORED_SUFFIXES = ("rotary_emb.inv_freq",)


class LayoutError(ValueError):
    """A checkpoint directory that does not hold a Qwen3 the built-in decoder can run; the
    message names the file and the field or tensor."""


def name_map(config: ModelConfig) -> List[Tuple[str, str]]:
    """(our state_dict name, HF name) for every tensor of a model with `config`."""
    return tensor_names(config, "hf")


def hf_config(config: ModelConfig, torch_dtype: str = "float32") -> Dict[str, Any]:
    """config.json for `config`, as `transformers`' Qwen3Config writes it."""
    if not config.qk_norm:
        raise LayoutError(
            "qk_norm: Qwen3 always normalises q and k; a model without has no Qwen3 layout"
        )
    return {
        "architectures": ["Qwen3ForCausalLM"],
        "model_type": "qwen3",
        "attention_bias": False,
        "attention_dropout": 0.0,
        "head_dim": config.resolved_head_dim,
        "hidden_act": "silu",
        "hidden_size": config.d_model,
        "initializer_range": 0.02,
        "intermediate_size": config.d_ff,
        "max_position_embeddings": config.max_seq_len,
        "max_window_layers": config.n_layers,
        "num_attention_heads": config.n_heads,
        "num_hidden_layers": config.n_layers,
        "num_key_value_heads": config.n_kv_heads,
        "rms_norm_eps": config.norm_eps,
        "rope_scaling": None,
        "rope_theta": config.rope_theta,
        "sliding_window": None,
        "use_sliding_window": False,
        "tie_word_embeddings": config.tie_embeddings,
        "torch_dtype": torch_dtype,
        "use_cache": True,
        "vocab_size": config.vocab_size,
    }


def _field(cfg: Dict[str, Any], key: str, where: str) -> int:
    value = cfg.get(key)
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise LayoutError(f"{where}: {key} must be a positive integer, got {value!r}")
    return value


def model_config_of(cfg: Dict[str, Any], where: str = CONFIG_FILE) -> ModelConfig:
    """The built-in decoder's config for an HF Qwen3 config.json; refuses what it cannot run."""
    if cfg.get("model_type") != "qwen3":
        raise LayoutError(f"{where}: model_type must be \"qwen3\", got {cfg.get('model_type')!r}")
    if cfg.get("hidden_act", "silu") != "silu":
        raise LayoutError(f"{where}: hidden_act {cfg.get('hidden_act')!r} is not silu")
    if cfg.get("attention_bias", False):
        raise LayoutError(f"{where}: attention_bias is true; the built-in decoder has no biases")
    if cfg.get("use_sliding_window", False):
        raise LayoutError(
            f"{where}: use_sliding_window is true; the built-in decoder attends fully"
        )
    # transformers 4.x writes rope_theta and rope_scaling; 5.x writes rope_parameters.
    rope = cfg.get("rope_parameters") or {}
    scaling = cfg.get("rope_scaling") or {}
    rope_type = scaling.get("rope_type", scaling.get("type")) or rope.get("rope_type", "default")
    if rope_type != "default":
        raise LayoutError(f"{where}: rope type {rope_type!r} is not supported (only default RoPE)")
    theta = cfg.get("rope_theta", rope.get("rope_theta", 10000.0))
    n_heads = _field(cfg, "num_attention_heads", where)
    n_kv = cfg.get("num_key_value_heads") or n_heads
    d_model = _field(cfg, "hidden_size", where)
    head_dim = cfg.get("head_dim") or d_model // n_heads
    if n_heads % n_kv:
        raise LayoutError(f"{where}: num_key_value_heads {n_kv} does not divide {n_heads} heads")
    if head_dim % 2:
        raise LayoutError(f"{where}: head_dim {head_dim} must be even (RoPE rotates pairs)")
    return ModelConfig(
        vocab_size=_field(cfg, "vocab_size", where),
        d_model=d_model,
        n_layers=_field(cfg, "num_hidden_layers", where),
        n_heads=n_heads,
        n_kv_heads=int(n_kv),
        d_ff=_field(cfg, "intermediate_size", where),
        max_seq_len=int(cfg.get("max_position_embeddings", 32768)),
        tie_embeddings=bool(cfg.get("tie_word_embeddings", False)),
        rope_theta=float(theta),
        qk_norm=True,
        norm_eps=float(cfg.get("rms_norm_eps", 1e-6)),
        # Implied head_dim stays implicit, so our own configs come back equal.
        head_dim=None if head_dim == d_model // n_heads else int(head_dim),
    )


def to_hf_tensors(
    state: Dict[str, torch.Tensor], config: ModelConfig, dtype: torch.dtype = torch.float32
) -> Dict[str, torch.Tensor]:
    """Our state_dict under HF names, in `dtype` (a tied model writes no lm_head)."""
    out = {}
    for ours, hf in name_map(config):
        if ours not in state:
            raise LayoutError(f"state_dict has no {ours!r}")
        out[hf] = state[ours].detach().to("cpu", dtype).contiguous()
    return out


def from_hf_tensors(
    tensors: Dict[str, torch.Tensor], config: ModelConfig, where: str
) -> Dict[str, torch.Tensor]:
    """HF-named tensors as our state_dict in float32; every tensor accounted for."""
    pairs = name_map(config)
    known = {hf for _, hf in pairs}
    extra = [
        k
        for k in tensors
        if k not in known
        and not k.endswith(_IGNORED_SUFFIXES)
        # A tied checkpoint may still carry the (identical) head; the embedding is the head.
        and not (config.tie_embeddings and k == "lm_head.weight")
    ]
    if extra:
        raise LayoutError(f"{where}: unexpected tensor {sorted(extra)[0]!r} for this config")
    state = {}
    for ours, hf in pairs:
        if hf not in tensors:
            raise LayoutError(f"{where}: missing tensor {hf!r}")
        t = tensors[hf]
        if not t.is_floating_point():
            raise LayoutError(f"{where}: tensor {hf!r} is {t.dtype}, not floating point")
        state[ours] = t.to(torch.float32)
    return state


def save_hf_dir(
    directory: str,
    state: Dict[str, torch.Tensor],
    config: ModelConfig,
    torch_dtype: str = "float32",
    tokenizer_dir: Optional[str] = None,
    max_shard_bytes: Optional[int] = None,
) -> List[str]:
    """Writes the HF layout of a built-in decoder's `state` into `directory`; returns the files.

    Tokenizer files found in `tokenizer_dir` (see TOKENIZER_FILES) are copied as they are: for
    the char tokenizer that is its `tokenizer.json` and `tokenizer_config.json`.
    """
    if torch_dtype not in _DTYPES:
        raise LayoutError(f"torch_dtype must be one of {sorted(_DTYPES)}, got {torch_dtype!r}")
    cfg = hf_config(config, torch_dtype)
    tensors = to_hf_tensors(state, config, _DTYPES[torch_dtype])
    os.makedirs(directory, exist_ok=True)
    files = st.save_dir(directory, tensors, max_shard_bytes, {"format": "pt"})
    with open(os.path.join(directory, CONFIG_FILE), "w", encoding="utf-8") as f:
        json.dump(cfg, f, indent=2)
        f.write("\n")
    files.append(CONFIG_FILE)
    if tokenizer_dir is not None:
        copied = [n for n in TOKENIZER_FILES if os.path.isfile(os.path.join(tokenizer_dir, n))]
        if "tokenizer.json" not in copied and "vocab.json" not in copied:
            raise LayoutError(f"tokenizer: {tokenizer_dir} has no tokenizer.json or vocab.json")
        for name in copied:
            src = os.path.join(tokenizer_dir, name)
            if os.path.abspath(src) != os.path.abspath(os.path.join(directory, name)):
                shutil.copyfile(src, os.path.join(directory, name))
        files += copied
    return files


def is_hf_dir(path: str) -> bool:
    return os.path.isdir(path) and os.path.isfile(os.path.join(path, CONFIG_FILE))


def is_qwen3_dir(path: str) -> bool:
    """An HF-layout directory whose config.json says model_type qwen3."""
    try:
        return is_hf_dir(path) and read_hf_config(path).get("model_type") == "qwen3"
    except LayoutError:
        return False


def read_hf_config(directory: str) -> Dict[str, Any]:
    path = os.path.join(directory, CONFIG_FILE)
    try:
        with open(path, encoding="utf-8") as f:
            cfg = json.load(f)
    except OSError as e:
        raise LayoutError(f"{path}: cannot read: {e}") from e
    except ValueError as e:
        raise LayoutError(f"{path}: not JSON: {e}") from e
    if not isinstance(cfg, dict):
        raise LayoutError(f"{path}: not a JSON object")
    return cfg


def load_hf_state(directory: str) -> Tuple[Dict[str, torch.Tensor], ModelConfig]:
    """(our float32 state_dict, config) of an HF Qwen3 directory."""
    config = model_config_of(read_hf_config(directory), os.path.join(directory, CONFIG_FILE))
    try:
        tensors = st.load_dir(directory)
    except (st.SafetensorsError, OSError) as e:
        raise LayoutError(str(e)) from e
    return from_hf_tensors(tensors, config, directory), config


def load_hf_dir(directory: str) -> Tuple[Decoder, ModelConfig]:
    """The built-in decoder holding an HF Qwen3 directory's weights (float32, CPU)."""
    state, config = load_hf_state(directory)
    model = Decoder(config)
    try:
        model.load_state_dict(state)
    except RuntimeError as e:  # a shape that does not fit config.json
        raise LayoutError(f"{directory}: tensors do not fit config.json: {e}") from e
    return model, config
