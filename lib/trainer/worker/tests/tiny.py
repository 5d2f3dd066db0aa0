"""The tiny built-in decoder the worker's tests train and sample (fast on a shared CPU)."""

from typing import Any, Dict


def tiny_config(vocab_size: int, max_seq_len: int = 64) -> Dict[str, Any]:
    """Two layers, d_model 32, 4 query heads over 2 KV heads (GQA), d_ff 48."""
    return {
        "vocab_size": vocab_size,
        "d_model": 32,
        "n_layers": 2,
        "n_heads": 4,
        "n_kv_heads": 2,
        "d_ff": 48,
        "max_seq_len": max_seq_len,
    }
