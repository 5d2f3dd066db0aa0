"""Field checkers of request validation: each refuses a bad value with a 400 that names the field
(`rows[2].loss_mask[3]`); `checked` applies a field's contract schema (type, bounds, enum)."""

from __future__ import annotations

import math
from typing import Any, Dict, List, Optional, Sequence

from . import contract
from .contract import Schema


class RequestError(Exception):
    """An error answered as HTTP `status` with `{"error": {"code", "message", "field"}}`."""

    def __init__(self, status: int, code: str, message: str, field_name: Optional[str] = None):
        super().__init__(message)
        self.status = status
        self.code = code
        self.message = message
        self.field = field_name

    def to_json(self) -> Dict[str, Any]:
        err: Dict[str, Any] = {"code": self.code, "message": self.message}
        if self.field is not None:
            err["field"] = self.field
        return {"error": err}


def bad(field_name: str, message: str) -> RequestError:
    return RequestError(400, "bad_request", f"{field_name}: {message}", field_name)


def is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _is_num(v: Any) -> bool:
    return (isinstance(v, (int, float)) and not isinstance(v, bool)) and math.isfinite(v)


def obj(value: Any, name: str) -> Dict[str, Any]:
    if not isinstance(value, dict):
        raise bad(name, "expected an object")
    return value


def num(
    value: Any,
    name: str,
    lo: Optional[float] = None,
    hi: Optional[float] = None,
    lo_open: bool = False,
    hi_open: bool = False,
) -> float:
    if not _is_num(value):
        raise bad(name, "expected a finite number")
    if lo is not None and (value < lo or (lo_open and value == lo)):
        raise bad(name, f"must be {'>' if lo_open else '>='} {lo}, got {value}")
    if hi is not None and (value > hi or (hi_open and value == hi)):
        raise bad(name, f"must be {'<' if hi_open else '<='} {hi}, got {value}")
    return float(value)


def integer(value: Any, name: str, lo: Optional[int] = None, hi: Optional[int] = None) -> int:
    if not is_int(value):
        raise bad(name, "expected an integer")
    if lo is not None and value < lo:
        raise bad(name, f"must be >= {lo}, got {value}")
    if hi is not None and value > hi:
        raise bad(name, f"must be <= {hi}, got {value}")
    return int(value)


def boolean(value: Any, name: str) -> bool:
    if not isinstance(value, bool):
        raise bad(name, "expected true or false")
    return value


def string(value: Any, name: str) -> str:
    if not isinstance(value, str) or not value:
        raise bad(name, "expected a non-empty string")
    return value


def one_of(value: Any, name: str, allowed: Sequence[str]) -> str:
    if value not in allowed:
        quoted = [f'"{a}"' for a in allowed]
        listed = quoted[0] if len(quoted) == 1 else f"{', '.join(quoted[:-1])} or {quoted[-1]}"
        raise bad(name, f"expected {listed}")
    return value


def checked(value: Any, name: str, schema: Schema) -> Any:
    """Checks one scalar field against its contract schema (type, bounds, enum, nullability)."""
    variants = schema.get("anyOf")
    if variants is not None:  # `T | null` (e.g. a seed)
        if value is None and any(v.get("type") == "null" for v in variants):
            return None
        schema = next(v for v in variants if v.get("type") != "null")
    kind = schema.get("type")
    if "enum" in schema:
        return one_of(value, name, schema["enum"])
    if kind == "integer":
        lo = schema.get("minimum")
        if "exclusiveMinimum" in schema:
            lo = math.floor(schema["exclusiveMinimum"]) + 1
        hi = schema.get("maximum")
        if "exclusiveMaximum" in schema:
            hi = math.ceil(schema["exclusiveMaximum"]) - 1
        return integer(value, name, lo=lo, hi=hi)
    if kind == "number":
        lo_open = "exclusiveMinimum" in schema
        hi_open = "exclusiveMaximum" in schema
        return num(
            value,
            name,
            lo=schema.get("exclusiveMinimum", schema.get("minimum")),
            hi=schema.get("exclusiveMaximum", schema.get("maximum")),
            lo_open=lo_open,
            hi_open=hi_open,
        )
    if kind == "boolean":
        return boolean(value, name)
    if kind == "string":
        return string(value, name)
    raise TypeError(f"{name}: the contract's {kind!r} fields are not scalars")


def field_or_default(o: Dict[str, Any], key: str, name: str, schema: Schema) -> Any:
    """`o[key]` checked against the contract, or the contract's default when absent (or null,
    as zod's optional fields arrive from some clients)."""
    value = o.get(key)
    if value is None:
        return contract.default(schema)
    return checked(value, name, schema)


def token_ids(value: Any, name: str, vocab_size: int, allow_empty: bool = False) -> List[int]:
    if not isinstance(value, list):
        raise bad(name, "expected an array of token ids")
    if not value and not allow_empty:
        raise bad(name, "expected at least one token id")
    # Fast path first (rows can hold 100k tokens); on failure, find the first bad element.
    if all(type(v) is int for v in value) and (
        not value or (min(value) >= 0 and max(value) < vocab_size)
    ):
        return value
    for i, v in enumerate(value):
        if not is_int(v):
            raise bad(f"{name}[{i}]", "expected an integer token id")
        if v < 0 or v >= vocab_size:
            raise bad(f"{name}[{i}]", f"token id {v} is outside the vocabulary [0, {vocab_size})")
    return list(value)


def numbers(value: Any, name: str, length: int) -> List[float]:
    if not isinstance(value, list):
        raise bad(name, "expected an array of numbers")
    if len(value) != length:
        raise bad(name, f"expected {length} values (one per token), got {len(value)}")
    if all(type(v) in (int, float) for v in value) and all(map(math.isfinite, value)):
        return value
    for i, v in enumerate(value):
        if not _is_num(v):
            raise bad(f"{name}[{i}]", f"expected a finite number, got {v!r}")
    return [float(v) for v in value]
