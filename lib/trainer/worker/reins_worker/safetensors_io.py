"""The safetensors format, read and written with torch alone.

Hand-written because the `safetensors` package cannot be installed where the worker runs
(PyPI is out of reach; Debian ships no python3-safetensors for this torch). The format is
small and documented: an 8-byte little-endian header length N, N bytes of JSON mapping each
tensor name to `{"dtype", "shape", "data_offsets": [begin, end]}` (offsets relative to the
byte buffer after the header; an optional `"__metadata__"` of string to string), then the
raw little-endian tensor bytes, row-major, with no holes. Sharded checkpoints add a
`model.safetensors.index.json` whose `weight_map` names each tensor's shard file.

Reading is strict: a header that overruns the file, an unknown dtype, a shape that does not
fit its byte range, overlapping ranges or a hole all fail with a message naming the tensor.
"""

from __future__ import annotations

import json
import os
import sys
from typing import Dict, Iterable, List, Optional, Tuple

import numpy as np
import torch

# dtype name -> (torch dtype, bytes per element). BF16 has no numpy dtype: it travels as int16.
DTYPES: Dict[str, Tuple[torch.dtype, int]] = {
    "F64": (torch.float64, 8),
    "F32": (torch.float32, 4),
    "F16": (torch.float16, 2),
    "BF16": (torch.bfloat16, 2),
    "I64": (torch.int64, 8),
    "I32": (torch.int32, 4),
    "I16": (torch.int16, 2),
    "I8": (torch.int8, 1),
    "U8": (torch.uint8, 1),
    "BOOL": (torch.bool, 1),
}
_NAME_OF = {dtype: name for name, (dtype, _) in DTYPES.items()}
# A header larger than this is not a checkpoint's (the spec caps it at 100 MB).
MAX_HEADER_BYTES = 100_000_000
INDEX_FILE = "model.safetensors.index.json"
SINGLE_FILE = "model.safetensors"


class SafetensorsError(ValueError):
    """A file that is not valid safetensors; the message names the file and the tensor."""


def _require_little_endian() -> None:
    if sys.byteorder != "little":  # the format is little-endian; so is every machine we run on
        raise SafetensorsError("safetensors I/O here assumes a little-endian machine")


def tensor_bytes(t: torch.Tensor) -> bytes:
    """The raw little-endian bytes of `t` (row-major), as safetensors stores them."""
    _require_little_endian()
    t = t.detach().cpu().contiguous()
    if t.dtype == torch.bfloat16:
        return t.view(torch.int16).numpy().tobytes()
    return t.numpy().tobytes()


def dtype_name(dtype: torch.dtype) -> str:
    if dtype not in _NAME_OF:
        raise SafetensorsError(f"no safetensors dtype for {dtype}")
    return _NAME_OF[dtype]


def encode(tensors: Dict[str, torch.Tensor], metadata: Optional[Dict[str, str]] = None) -> bytes:
    """The whole file as bytes (tests and small models; `save` streams instead)."""
    header, order = _header(tensors, metadata)
    return header + b"".join(tensor_bytes(tensors[name]) for name in order)


def _header(
    tensors: Dict[str, torch.Tensor], metadata: Optional[Dict[str, str]]
) -> Tuple[bytes, List[str]]:
    entries: Dict[str, object] = {}
    if metadata:
        entries["__metadata__"] = {str(k): str(v) for k, v in metadata.items()}
    order = sorted(tensors)
    offset = 0
    for name in order:
        t = tensors[name]
        size = t.numel() * DTYPES[dtype_name(t.dtype)][1]
        entries[name] = {
            "dtype": dtype_name(t.dtype),
            "shape": list(t.shape),
            "data_offsets": [offset, offset + size],
        }
        offset += size
    raw = json.dumps(entries, separators=(",", ":")).encode("utf-8")
    raw += b" " * (-len(raw) % 8)  # the data buffer starts 8-byte aligned
    return len(raw).to_bytes(8, "little") + raw, order


def save(
    path: str, tensors: Dict[str, torch.Tensor], metadata: Optional[Dict[str, str]] = None
) -> int:
    """Writes `tensors` to `path` (atomically: a crash leaves no torn file); returns its size."""
    header, order = _header(tensors, metadata)
    tmp = f"{path}.tmp-{os.getpid()}"
    with open(tmp, "wb") as f:
        f.write(header)
        for name in order:
            f.write(tensor_bytes(tensors[name]))
    os.replace(tmp, path)
    return os.path.getsize(path)


def read_header(path: str) -> Tuple[Dict[str, dict], Dict[str, str], int]:
    """(tensor entries, metadata, byte offset of the data buffer), validated against the file."""
    size = os.path.getsize(path)
    with open(path, "rb") as f:
        head = f.read(8)
        if len(head) < 8:
            raise SafetensorsError(f"{path}: shorter than the 8-byte header length")
        n = int.from_bytes(head, "little")
        if n > MAX_HEADER_BYTES or 8 + n > size:
            raise SafetensorsError(f"{path}: header length {n} overruns the file ({size} bytes)")
        raw = f.read(n)
    try:
        header = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise SafetensorsError(f"{path}: header is not JSON: {e}")
    if not isinstance(header, dict):
        raise SafetensorsError(f"{path}: header is not a JSON object")
    metadata = header.pop("__metadata__", None) or {}
    if not isinstance(metadata, dict):
        raise SafetensorsError(f"{path}: __metadata__ is not an object")
    data_start = 8 + n
    spans = []
    for name, entry in header.items():
        spans.append((_check_entry(path, name, entry), name))
    spans.sort()
    cursor = 0
    for (begin, end), name in spans:
        if begin != cursor:
            what = "overlaps the previous tensor" if begin < cursor else "leaves a hole before it"
            raise SafetensorsError(
                f"{path}: tensor {name!r} {what} (offset {begin}, expected {cursor})"
            )
        cursor = end
    if data_start + cursor != size:
        raise SafetensorsError(
            f"{path}: tensors cover {cursor} bytes but the data buffer has {size - data_start}"
        )
    return header, metadata, data_start


def _check_entry(path: str, name: str, entry: object) -> Tuple[int, int]:
    if not isinstance(entry, dict):
        raise SafetensorsError(f"{path}: tensor {name!r} has no entry object")
    dtype = entry.get("dtype")
    if dtype not in DTYPES:
        raise SafetensorsError(f"{path}: tensor {name!r} has unknown dtype {dtype!r}")
    shape = entry.get("shape")
    if not isinstance(shape, list) or not all(isinstance(d, int) and d >= 0 for d in shape):
        raise SafetensorsError(f"{path}: tensor {name!r} has a bad shape {shape!r}")
    offsets = entry.get("data_offsets")
    if (
        not isinstance(offsets, list)
        or len(offsets) != 2
        or not all(isinstance(o, int) and o >= 0 for o in offsets)
        or offsets[1] < offsets[0]
    ):
        raise SafetensorsError(f"{path}: tensor {name!r} has bad data_offsets {offsets!r}")
    numel = int(np.prod(shape)) if shape else 1
    if offsets[1] - offsets[0] != numel * DTYPES[dtype][1]:
        raise SafetensorsError(
            f"{path}: tensor {name!r} of shape {shape} and dtype {dtype} needs "
            f"{numel * DTYPES[dtype][1]} bytes, its range holds {offsets[1] - offsets[0]}"
        )
    return offsets[0], offsets[1]


def load(path: str, names: Optional[Iterable[str]] = None) -> Dict[str, torch.Tensor]:
    """The tensors of one file (all, or those in `names`), each a fresh CPU tensor."""
    _require_little_endian()
    header, _, data_start = read_header(path)
    wanted = set(header) if names is None else set(names)
    missing = wanted - set(header)
    if missing:
        raise SafetensorsError(f"{path}: no tensor {sorted(missing)[0]!r}")
    out: Dict[str, torch.Tensor] = {}
    with open(path, "rb") as f:
        for name in sorted(wanted, key=lambda k: header[k]["data_offsets"][0]):
            entry = header[name]
            begin, end = entry["data_offsets"]
            f.seek(data_start + begin)
            raw = f.read(end - begin)
            dtype, _ = DTYPES[entry["dtype"]]
            if dtype == torch.bfloat16:
                t = torch.from_numpy(np.frombuffer(raw, dtype=np.int16).copy()).view(torch.bfloat16)
            elif dtype == torch.bool:
                t = torch.from_numpy(np.frombuffer(raw, dtype=np.bool_).copy())
            else:
                np_dtype = torch.empty(0, dtype=dtype).numpy().dtype
                t = torch.from_numpy(np.frombuffer(raw, dtype=np_dtype).copy())
            out[name] = t.reshape(entry["shape"])
    return out


def load_dir(directory: str) -> Dict[str, torch.Tensor]:
    """All tensors of a checkpoint directory: `model.safetensors`, or the shards its
    `model.safetensors.index.json` lists (each shard read once)."""
    index_path = os.path.join(directory, INDEX_FILE)
    if os.path.isfile(index_path):
        try:
            with open(index_path, encoding="utf-8") as f:
                weight_map = json.load(f)["weight_map"]
        except (OSError, ValueError, KeyError, TypeError) as e:
            raise SafetensorsError(f"{index_path}: not a safetensors index: {e}")
        if not isinstance(weight_map, dict):
            raise SafetensorsError(f"{index_path}: weight_map is not an object")
        by_shard: Dict[str, List[str]] = {}
        for name, shard in weight_map.items():
            if not isinstance(shard, str) or os.path.basename(shard) != shard:
                raise SafetensorsError(f"{index_path}: tensor {name!r} names a bad shard {shard!r}")
            by_shard.setdefault(shard, []).append(name)
        out: Dict[str, torch.Tensor] = {}
        for shard, names in sorted(by_shard.items()):
            out.update(load(os.path.join(directory, shard), names))
        return out
    single = os.path.join(directory, SINGLE_FILE)
    if not os.path.isfile(single):
        raise SafetensorsError(f"{directory}: has neither {SINGLE_FILE} nor {INDEX_FILE}")
    return load(single)


def save_dir(
    directory: str,
    tensors: Dict[str, torch.Tensor],
    max_shard_bytes: Optional[int] = None,
    metadata: Optional[Dict[str, str]] = None,
) -> List[str]:
    """Writes `model.safetensors`, or, past `max_shard_bytes`, numbered shards
    (`model-00001-of-00003.safetensors`, …) and their index. Returns the files written."""
    os.makedirs(directory, exist_ok=True)
    sizes = {k: t.numel() * t.element_size() for k, t in tensors.items()}
    if max_shard_bytes is None or sum(sizes.values()) <= max_shard_bytes:
        save(os.path.join(directory, SINGLE_FILE), tensors, metadata)
        return [SINGLE_FILE]
    shards: List[Dict[str, torch.Tensor]] = [{}]
    used = 0
    for name in sorted(tensors):
        if shards[-1] and used + sizes[name] > max_shard_bytes:
            shards.append({})
            used = 0
        shards[-1][name] = tensors[name]
        used += sizes[name]
    files = [f"model-{i + 1:05d}-of-{len(shards):05d}.safetensors" for i in range(len(shards))]
    weight_map = {}
    for file, shard in zip(files, shards):
        save(os.path.join(directory, file), shard, metadata)
        weight_map.update({name: file for name in shard})
    index = {"metadata": {"total_size": sum(sizes.values())}, "weight_map": weight_map}
    with open(os.path.join(directory, INDEX_FILE), "w", encoding="utf-8") as f:
        json.dump(index, f, indent=2, sort_keys=True)
        f.write("\n")
    return files + [INDEX_FILE]
