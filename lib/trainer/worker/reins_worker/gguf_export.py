"""GGUF export of the built-in decoder (llama.cpp's `qwen3` architecture: f32, f16, q8_0, q4_0).

Hand-written because nothing reachable writes GGUF: no npm or Debian package does, and the
`gguf` Python package cannot be installed here. It lives in the worker, in Python, because
every checkpoint it exports is a torch object (our torch archives only torch reads, HF
directories go through `hf_layout`), and because the live worker can export the weights it
holds without writing a checkpoint first (weight sync to llama.cpp).

The format (GGUF v3, little-endian): magic `GGUF`, uint32 version 3, uint64 tensor count,
uint64 metadata count; metadata as (string key, uint32 value type, value) with strings as
uint64 length + UTF-8 bytes and arrays as (uint32 element type, uint64 count, elements);
tensor infos as (name, uint32 n_dims, uint64 dims in ggml order — fastest-varying first, so a
torch [out, in] weight has dims [in, out] —, uint32 ggml type, uint64 offset into the data);
padding to `general.alignment` (32); the data, each tensor starting aligned. q8_0 stores rows
in blocks of 32 values: an f16 scale d = max|x|/127 then 32 int8 round(x/d). q4_0 (llama.cpp's
`quantize_row_q4_0_ref`) stores 32 values in 18 bytes: an f16 scale d = max/-8, where max is the
signed value of largest magnitude, then 16 bytes of 4-bit codes min(15, trunc(x/d + 8.5)), value
j in the low nibble of byte j and value j+16 in its high nibble; it dequantizes to (code - 8)·d.

Names and metadata follow llama.cpp's convert_hf_to_gguf.py for Qwen3: no Q/K permutation
(llama.cpp runs qwen3 with NEOX RoPE, the split-halves rotation HF uses; only its `llama`
architecture wants permuted rows), 1-D tensors (norms) stay f32, and a 2-D tensor whose row
is not a multiple of 32 falls back from q8_0 or q4_0 to f16 as llama.cpp's converter does.
"""

from __future__ import annotations

import json
import os
import struct
from typing import Any, Dict, List, Optional, Tuple

import numpy as np
import torch

from .model import ModelConfig
from .tensor_names import tensor_names

GGUF_MAGIC = b"GGUF"
GGUF_VERSION = 3
ALIGNMENT = 32
# GGUF metadata value types.
UINT8, INT8, UINT16, INT16, UINT32, INT32, FLOAT32, BOOL, STRING, ARRAY = range(10)
UINT64, INT64, FLOAT64 = 10, 11, 12
# ggml tensor types: (id, block size in values, bytes per block).
GGML_TYPES = {"f32": (0, 1, 4), "f16": (1, 1, 2), "q4_0": (2, 32, 18), "q8_0": (8, 32, 34)}
_TYPE_NAMES = {v[0]: k for k, v in GGML_TYPES.items()}
# llama_ftype: ALL_F32, MOSTLY_F16, MOSTLY_Q4_0, MOSTLY_Q8_0
FILE_TYPES = {"f32": 0, "f16": 1, "q4_0": 2, "q8_0": 7}
# llama.cpp token types.
NORMAL, UNKNOWN, CONTROL, USER_DEFINED, UNUSED, BYTE = 1, 2, 3, 4, 5, 6

_SCALAR_FORMATS = {
    UINT8: "<B", INT8: "<b", UINT16: "<H", INT16: "<h", UINT32: "<I", INT32: "<i",
    FLOAT32: "<f", BOOL: "<?", UINT64: "<Q", INT64: "<q", FLOAT64: "<d",
}  # fmt: skip


class GGUFError(ValueError):
    """Bad export input or a file that is not GGUF; the message names the field."""


# -- values ----------------------------------------------------------------------------------


def _string(s: str) -> bytes:
    raw = s.encode("utf-8")
    return struct.pack("<Q", len(raw)) + raw


def _value(vtype: int, value: Any) -> bytes:
    if vtype == STRING:
        return _string(value)
    if vtype == ARRAY:
        etype, items = value
        body = b"".join(_value(etype, v) for v in items)
        return struct.pack("<IQ", etype, len(items)) + body
    return struct.pack(_SCALAR_FORMATS[vtype], value)


def tensor_nbytes(shape: Tuple[int, ...], ggml_type: str) -> int:
    _, block, size = GGML_TYPES[ggml_type]
    n = int(np.prod(shape))
    if shape[-1] % block:
        raise GGUFError(f"a row of {shape[-1]} values is not a whole number of {block}-blocks")
    return n // block * size


def quantize_q8_0(x: np.ndarray) -> bytes:
    """llama.cpp's reference q8_0 (quantize_row_q8_0_ref): per 32 values an f16 scale
    d = max|x|/127 and int8 round-half-away-from-zero(x/d)."""
    blocks = np.ascontiguousarray(x, dtype=np.float32).reshape(-1, 32)
    d = np.abs(blocks).max(axis=1) / 127.0
    inv = np.divide(1.0, d, out=np.zeros_like(d), where=d != 0)
    scaled = blocks * inv[:, None]
    q = (np.sign(scaled) * np.floor(np.abs(scaled) + 0.5)).astype(np.int8)
    out = np.empty((blocks.shape[0], 34), dtype=np.uint8)
    out[:, :2] = d.astype(np.float16).view(np.uint8).reshape(-1, 2)
    out[:, 2:] = q.view(np.uint8)
    return out.tobytes()


def dequantize_q8_0(raw: bytes, n: int) -> np.ndarray:
    blocks = np.frombuffer(raw, dtype=np.uint8).reshape(-1, 34)
    d = blocks[:, :2].copy().view(np.float16).astype(np.float32)
    q = blocks[:, 2:].copy().view(np.int8).astype(np.float32)
    return (q * d).reshape(-1)[:n]


def quantize_q4_0(x: np.ndarray) -> bytes:
    """llama.cpp's reference q4_0 (quantize_row_q4_0_ref): per 32 values an f16 scale
    d = max/-8 (max: the value of largest magnitude, sign kept, so it maps to code 0 and the
    codes span [-8, 7]·d) and 4-bit codes min(15, trunc(x/d + 8.5)); byte j holds value j in its
    low nibble and value j+16 in its high nibble. The codes use the f32 d, as llama.cpp's do."""
    blocks = np.ascontiguousarray(x, dtype=np.float32).reshape(-1, 32)
    largest = np.abs(blocks).argmax(axis=1)
    signed_max = blocks[np.arange(blocks.shape[0]), largest]
    d = (signed_max / np.float32(-8.0)).astype(np.float32)
    inv = np.divide(np.float32(1.0), d, out=np.zeros_like(d), where=d != 0)
    # x·(1/d) + 8.5 lies in [0.5, 16.5]: truncation is the floor there; 16 (x = -max) clips to 15.
    codes = np.minimum(15, np.trunc(blocks * inv[:, None] + np.float32(8.5))).astype(np.uint8)
    out = np.empty((blocks.shape[0], 18), dtype=np.uint8)
    out[:, :2] = d.astype(np.float16).view(np.uint8).reshape(-1, 2)
    out[:, 2:] = codes[:, :16] | (codes[:, 16:] << 4)
    return out.tobytes()


def dequantize_q4_0(raw: bytes, n: int) -> np.ndarray:
    blocks = np.frombuffer(raw, dtype=np.uint8).reshape(-1, 18)
    d = blocks[:, :2].copy().view(np.float16).astype(np.float32)
    packed = blocks[:, 2:]
    codes = np.concatenate([packed & 0x0F, packed >> 4], axis=1).astype(np.float32)
    return ((codes - 8.0) * d).reshape(-1)[:n]


def encode_tensor(t: torch.Tensor, ggml_type: str) -> bytes:
    a = t.detach().to("cpu", torch.float32).contiguous().numpy()
    if ggml_type == "f32":
        return a.astype("<f4").tobytes()
    if ggml_type == "f16":
        return a.astype("<f2").tobytes()
    if ggml_type == "q4_0":
        return quantize_q4_0(a)
    return quantize_q8_0(a)


# -- the file --------------------------------------------------------------------------------


class GGUFWriter:
    """Collects metadata and tensors, then streams the file (tensors converted one by one)."""

    def __init__(self) -> None:
        self.kv: List[Tuple[str, int, Any]] = []
        self.tensors: List[Tuple[str, torch.Tensor, str]] = []

    def add(self, key: str, vtype: int, value: Any) -> None:
        self.kv.append((key, vtype, value))

    def add_array(self, key: str, etype: int, items: List[Any]) -> None:
        self.kv.append((key, ARRAY, (etype, items)))

    def add_tensor(self, name: str, t: torch.Tensor, ggml_type: str) -> None:
        self.tensors.append((name, t, ggml_type))

    def write(self, path: str) -> int:
        """Writes atomically (a reader never sees a torn file); returns the size in bytes."""
        head = bytearray(GGUF_MAGIC)
        head += struct.pack("<IQQ", GGUF_VERSION, len(self.tensors), len(self.kv))
        for key, vtype, value in self.kv:
            head += _string(key) + struct.pack("<I", vtype) + _value(vtype, value)
        offset = 0
        for name, t, ggml_type in self.tensors:
            dims = list(reversed(t.shape))  # ggml order: the row (fastest-varying) first
            head += _string(name) + struct.pack("<I", len(dims))
            head += struct.pack(f"<{len(dims)}Q", *dims)
            head += struct.pack("<IQ", GGML_TYPES[ggml_type][0], offset)
            offset += _aligned(tensor_nbytes(tuple(t.shape), ggml_type))
        head += b"\0" * (-len(head) % ALIGNMENT)
        tmp = f"{path}.tmp-{os.getpid()}"
        with open(tmp, "wb") as f:
            f.write(head)
            for _, t, ggml_type in self.tensors:
                data = encode_tensor(t, ggml_type)
                f.write(data + b"\0" * (-len(data) % ALIGNMENT))
        os.replace(tmp, path)
        return os.path.getsize(path)


def _aligned(n: int) -> int:
    return n + (-n % ALIGNMENT)


class GGUFFile:
    """A parsed GGUF file: `metadata` (key → value), `infos` (name → (dims, type name, offset))
    and `tensor(name)` dequantized to float32 in torch order. Used to check exports."""

    def __init__(self, path: str) -> None:
        with open(path, "rb") as f:
            self._raw = f.read()
        self._pos = 0
        if self._take(4) != GGUF_MAGIC:
            raise GGUFError(f"{path}: not a GGUF file (bad magic)")
        version, n_tensors, n_kv = struct.unpack("<IQQ", self._take(20))
        if version != GGUF_VERSION:
            raise GGUFError(f"{path}: GGUF version {version}, expected {GGUF_VERSION}")
        self.metadata: Dict[str, Any] = {}
        for _ in range(n_kv):
            key = self._str()
            (vtype,) = struct.unpack("<I", self._take(4))
            self.metadata[key] = self._read_value(vtype)
        self.infos: Dict[str, Tuple[List[int], str, int]] = {}
        for _ in range(n_tensors):
            name = self._str()
            (n_dims,) = struct.unpack("<I", self._take(4))
            dims = list(struct.unpack(f"<{n_dims}Q", self._take(8 * n_dims)))
            type_id, offset = struct.unpack("<IQ", self._take(12))
            if type_id not in _TYPE_NAMES:
                raise GGUFError(f"{path}: tensor {name!r} has ggml type {type_id} (not read here)")
            self.infos[name] = (dims, _TYPE_NAMES[type_id], offset)
        align = int(self.metadata.get("general.alignment", ALIGNMENT))
        self.data_start = _aligned_to(self._pos, align)

    def _take(self, n: int) -> bytes:
        if self._pos + n > len(self._raw):
            raise GGUFError("GGUF file ends inside its header")
        out = self._raw[self._pos : self._pos + n]
        self._pos += n
        return out

    def _str(self) -> str:
        (n,) = struct.unpack("<Q", self._take(8))
        return self._take(n).decode("utf-8")

    def _read_value(self, vtype: int) -> Any:
        if vtype == STRING:
            return self._str()
        if vtype == ARRAY:
            etype, count = struct.unpack("<IQ", self._take(12))
            return [self._read_value(etype) for _ in range(count)]
        if vtype not in _SCALAR_FORMATS:
            raise GGUFError(f"unknown GGUF value type {vtype}")
        fmt = _SCALAR_FORMATS[vtype]
        return struct.unpack(fmt, self._take(struct.calcsize(fmt)))[0]

    def tensor(self, name: str) -> torch.Tensor:
        dims, ggml_type, offset = self.infos[name]
        shape = tuple(reversed(dims))
        start = self.data_start + offset
        raw = self._raw[start : start + tensor_nbytes(shape, ggml_type)]
        n = int(np.prod(shape))
        if ggml_type == "f32":
            a = np.frombuffer(raw, dtype="<f4")
        elif ggml_type == "f16":
            a = np.frombuffer(raw, dtype="<f2").astype(np.float32)
        elif ggml_type == "q4_0":
            a = dequantize_q4_0(raw, n)
        else:
            a = dequantize_q8_0(raw, n)
        return torch.from_numpy(a.copy()).reshape(shape)


def _aligned_to(n: int, align: int) -> int:
    return n + (-n % align)


# -- the model -------------------------------------------------------------------------------


def gguf_tensor_names(config: ModelConfig) -> List[Tuple[str, str]]:
    """(our state_dict name, GGUF name) for every tensor llama.cpp's qwen3 reads."""
    return tensor_names(config, "gguf")


def _tensor_type(t: torch.Tensor, file_type: str) -> str:
    if t.dim() < 2 or file_type == "f32":
        return "f32"
    if file_type in ("q8_0", "q4_0") and t.shape[-1] % 32:
        return "f16"  # as llama.cpp's converter does for rows it cannot block
    return file_type


def export_gguf(
    path: str,
    state: Dict[str, torch.Tensor],
    config: ModelConfig,
    file_type: str,
    tokenizer_dir: str,
    name: str = "reins-policy",
) -> Dict[str, Any]:
    """Writes `state` (the built-in decoder's state_dict names) as a llama.cpp qwen3 GGUF."""
    if file_type not in FILE_TYPES:
        raise GGUFError(f"type must be one of {sorted(FILE_TYPES)}, got {file_type!r}")
    if not config.qk_norm:
        raise GGUFError("qk_norm: llama.cpp's qwen3 always normalises q and k")
    w = GGUFWriter()
    arch = "qwen3"
    w.add("general.architecture", STRING, arch)
    w.add("general.name", STRING, name)
    w.add("general.file_type", UINT32, FILE_TYPES[file_type])
    w.add("general.quantization_version", UINT32, 2)
    w.add("general.alignment", UINT32, ALIGNMENT)
    w.add(f"{arch}.context_length", UINT32, config.max_seq_len)
    w.add(f"{arch}.embedding_length", UINT32, config.d_model)
    w.add(f"{arch}.block_count", UINT32, config.n_layers)
    w.add(f"{arch}.feed_forward_length", UINT32, config.d_ff)
    w.add(f"{arch}.attention.head_count", UINT32, config.n_heads)
    w.add(f"{arch}.attention.head_count_kv", UINT32, config.n_kv_heads)
    w.add(f"{arch}.attention.key_length", UINT32, config.resolved_head_dim)
    w.add(f"{arch}.attention.value_length", UINT32, config.resolved_head_dim)
    w.add(f"{arch}.rope.freq_base", FLOAT32, float(config.rope_theta))
    w.add(f"{arch}.attention.layer_norm_rms_epsilon", FLOAT32, float(config.norm_eps))
    add_tokenizer(w, tokenizer_dir, config.vocab_size)
    types: Dict[str, int] = {}
    for ours, gguf_name in gguf_tensor_names(config):
        if ours not in state:
            raise GGUFError(f"state_dict has no {ours!r}")
        t = state[ours]
        ggml_type = _tensor_type(t, file_type)
        types[ggml_type] = types.get(ggml_type, 0) + 1
        w.add_tensor(gguf_name, t, ggml_type)
    size = w.write(path)
    return {"path": path, "type": file_type, "bytes": size, "tensor_types": types}


# -- the tokenizer ---------------------------------------------------------------------------


def _bytes_to_unicode() -> Dict[int, str]:
    """GPT-2's byte-level alphabet: printable bytes map to themselves, the rest to U+0100…"""
    keep = list(range(ord("!"), ord("~") + 1)) + list(range(0xA1, 0xAD)) + list(range(0xAE, 0x100))
    out: Dict[int, str] = {b: chr(b) for b in keep}
    extra = 0
    for b in range(256):
        if b not in out:
            out[b] = chr(256 + extra)
            extra += 1
    return out


def _mentions_byte_level(node: Any) -> bool:
    if isinstance(node, dict):
        if node.get("type") == "ByteLevel":
            return True
        return any(_mentions_byte_level(v) for v in node.values())
    if isinstance(node, list):
        return any(_mentions_byte_level(v) for v in node)
    return False


def _read_json(path: str) -> Dict[str, Any]:
    try:
        with open(path, encoding="utf-8") as f:
            data = json.load(f)
    except (OSError, ValueError) as e:
        raise GGUFError(f"tokenizer: cannot read {path}: {e}") from e
    if not isinstance(data, dict):
        raise GGUFError(f"tokenizer: {path} is not a JSON object")
    return data


def _token_content(value: Any) -> Optional[str]:
    if isinstance(value, dict):
        value = value.get("content")
    return value if isinstance(value, str) else None


def add_tokenizer(w: GGUFWriter, tokenizer_dir: str, vocab_size: int) -> None:
    """A `gpt2` (byte-level BPE) vocabulary from a Hugging Face tokenizer.json, as llama.cpp's
    converter writes Qwen3's. A tokenizer that is not byte-level (the char tokenizer: raw
    characters, no merges) has its tokens rewritten into the byte-level alphabet, so llama.cpp
    tokenizes and detokenizes them the same. Ids the tokenizer lacks up to the model's
    vocab_size become unused `[PADn]` tokens (as for Qwen3, whose embedding is padded)."""
    tok = _read_json(os.path.join(tokenizer_dir, "tokenizer.json"))
    model = tok.get("model") or {}
    if model.get("type") != "BPE" or not isinstance(model.get("vocab"), dict):
        raise GGUFError("tokenizer: only BPE tokenizer.json files convert (model.type \"BPE\")")
    byte_level = _mentions_byte_level([tok.get("pre_tokenizer"), tok.get("decoder")])
    alphabet = _bytes_to_unicode()
    tokens: Dict[int, Tuple[str, int]] = {}
    for text, i in model["vocab"].items():
        if not byte_level:
            text = "".join(alphabet[b] for b in text.encode("utf-8"))
        tokens[int(i)] = (text, NORMAL)
    for added in tok.get("added_tokens") or []:
        kind = CONTROL if added.get("special") else USER_DEFINED
        tokens[int(added["id"])] = (added["content"], kind)
    if tokens and max(tokens) >= vocab_size:
        raise GGUFError(
            f"tokenizer: token id {max(tokens)} does not fit the model's vocab_size {vocab_size}"
        )
    texts = [tokens.get(i, (f"[PAD{i}]", UNUSED))[0] for i in range(vocab_size)]
    kinds = [tokens.get(i, ("", UNUSED))[1] for i in range(vocab_size)]
    merges = [m if isinstance(m, str) else " ".join(m) for m in model.get("merges") or []]
    w.add("tokenizer.ggml.model", STRING, "gpt2")
    w.add("tokenizer.ggml.pre", STRING, "qwen2" if byte_level else "default")
    w.add_array("tokenizer.ggml.tokens", STRING, texts)
    w.add_array("tokenizer.ggml.token_type", INT32, kinds)
    w.add_array("tokenizer.ggml.merges", STRING, merges)
    config_path = os.path.join(tokenizer_dir, "tokenizer_config.json")
    cfg = _read_json(config_path) if os.path.isfile(config_path) else {}
    ids = {text: i for i, (text, _) in tokens.items()}
    for field, key in (("eos_token", "eos"), ("pad_token", "padding"), ("bos_token", "bos")):
        content = _token_content(cfg.get(field))
        if content is not None and content in ids:
            w.add(f"tokenizer.ggml.{key}_token_id", UINT32, ids[content])
    w.add("tokenizer.ggml.add_bos_token", BOOL, bool(cfg.get("add_bos_token", False)))
    template = cfg.get("chat_template")
    if isinstance(template, str):
        w.add("tokenizer.chat_template", STRING, template)
