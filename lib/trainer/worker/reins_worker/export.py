"""Converts a checkpoint of the built-in decoder to the field's formats.

    python3 -m reins_worker.export --checkpoint <file or HF dir> \\
        [--gguf out.gguf --type f32|f16|q8_0|q4_0] \\
        [--hf out_dir --dtype float32|bfloat16|float16] [--tokenizer <dir with tokenizer.json>]

The checkpoint is either one of ours (a `reins-trainer-checkpoint` torch archive written by
POST /save) or a Qwen3 directory in the Hugging Face layout. The tokenizer defaults to the
checkpoint's directory when that holds a `tokenizer.json` (an HF directory does). Prints one
JSON line describing what was written; bad input exits 2 with a message naming the flag.
(`deno task export` runs this with the worker's Python.)
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from typing import Any, Dict, List, Optional, Tuple

import torch

from . import gguf_export, hf_layout
from .model import ModelConfig


class ExportError(ValueError):
    def __init__(self, flag: str, message: str) -> None:
        super().__init__(f"{flag}: {message}")
        self.flag = flag


def read_checkpoint(path: str) -> Tuple[Dict[str, torch.Tensor], ModelConfig]:
    """(our float32 state_dict, config) of a reins checkpoint file or an HF Qwen3 directory."""
    if hf_layout.is_hf_dir(path):
        try:
            return hf_layout.load_hf_state(path)
        except hf_layout.LayoutError as e:
            raise ExportError("--checkpoint", str(e)) from e
    if not os.path.isfile(path):
        raise ExportError(
            "--checkpoint", f"{path} is neither a checkpoint file nor an HF directory"
        )
    from .engine import CHECKPOINT_FORMAT, _torch_load

    try:
        data = _torch_load(path)
    except Exception as e:  # not a torch archive
        raise ExportError("--checkpoint", f"cannot read {path}: {e}") from e
    if not isinstance(data, dict) or data.get("format") != CHECKPOINT_FORMAT:
        raise ExportError("--checkpoint", f"{path} is not a reins trainer checkpoint")
    if data.get("model_kind") != "builtin":
        raise ExportError("--checkpoint", "only built-in decoder checkpoints export")
    try:
        config = ModelConfig(**data["config"])
    except (KeyError, TypeError) as e:
        raise ExportError("--checkpoint", f"{path} has no usable config: {e}") from e
    return {k: v.float() for k, v in data["model"].items()}, config


def resolve_tokenizer(checkpoint: str, tokenizer: Optional[str]) -> Optional[str]:
    if tokenizer is not None:
        if not os.path.isfile(os.path.join(tokenizer, "tokenizer.json")):
            raise ExportError("--tokenizer", f"{tokenizer} has no tokenizer.json")
        return tokenizer
    if os.path.isdir(checkpoint) and os.path.isfile(os.path.join(checkpoint, "tokenizer.json")):
        return checkpoint
    return None


def run(argv: List[str]) -> Dict[str, Any]:
    p = argparse.ArgumentParser(prog="reins_worker.export", description=__doc__)
    p.add_argument("--checkpoint", required=True)
    p.add_argument("--gguf")
    p.add_argument("--type", default="f16", choices=sorted(gguf_export.FILE_TYPES))
    p.add_argument("--hf")
    p.add_argument("--dtype", default="float32", choices=["float32", "bfloat16", "float16"])
    p.add_argument("--tokenizer")
    p.add_argument("--name", default="reins-policy")
    p.add_argument("--max-shard-bytes", type=int)
    args = p.parse_args(argv)
    if not args.gguf and not args.hf:
        raise ExportError("--gguf", "give --gguf <file> and/or --hf <dir>")
    tokenizer = resolve_tokenizer(args.checkpoint, args.tokenizer)
    state, config = read_checkpoint(args.checkpoint)
    out: Dict[str, Any] = {"checkpoint": args.checkpoint, "config": config.to_dict()}
    if args.gguf:
        if tokenizer is None:
            raise ExportError(
                "--tokenizer", "GGUF needs the model's tokenizer: give a dir with tokenizer.json"
            )
        try:
            out["gguf"] = gguf_export.export_gguf(
                args.gguf, state, config, args.type, tokenizer, args.name
            )
        except gguf_export.GGUFError as e:
            raise ExportError("--gguf", str(e)) from e
    if args.hf:
        try:
            files = hf_layout.save_hf_dir(
                args.hf, state, config, args.dtype, tokenizer, args.max_shard_bytes
            )
        except hf_layout.LayoutError as e:
            raise ExportError("--hf", str(e)) from e
        out["hf"] = {"dir": args.hf, "files": files, "dtype": args.dtype}
    return out


def main() -> None:
    try:
        print(json.dumps(run(sys.argv[1:])))
    except ExportError as e:
        print(f"error: {e}", file=sys.stderr)
        sys.exit(2)


if __name__ == "__main__":
    main()
