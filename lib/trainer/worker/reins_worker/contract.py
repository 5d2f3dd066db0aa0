"""The worker's request contract, read from `contract.schema.json`: the JSON Schema that
`deno task contract:emit` emits from the TypeScript client's zod schemas (lib/trainer/contract.ts).

`validate.py` takes every default, enum and bound from here instead of restating them, so the
client and the worker cannot disagree on them; tests/trainer_contract_test.ts fails when the
committed file is stale, and tests/test_contract.py when a field the contract names has no
parser here.
"""

from __future__ import annotations

import copy
import json
import os
from typing import Any, Dict, List

_PATH = os.path.join(os.path.dirname(os.path.abspath(__file__)), "contract.schema.json")

with open(_PATH, encoding="utf-8") as _file:
    CONTRACT: Dict[str, Any] = json.load(_file)

Schema = Dict[str, Any]


def node(request: str, *path: str) -> Schema:
    """The JSON Schema of a field of a request body: `node("init", "optimizer", "lr")`. A step
    into a union picks the variant whose `kind` is that constant:
    `node("init", "model", "builtin", "config")`."""
    current: Schema = CONTRACT["requests"][request]
    for key in path:
        props = current.get("properties", {})
        if key in props:
            current = props[key]
            continue
        variants = current.get("oneOf", []) + current.get("anyOf", [])
        match = [v for v in variants if v.get("properties", {}).get("kind", {}).get("const") == key]
        if not match:
            raise KeyError(f"the contract has no field {request}.{'.'.join(path)}")
        current = match[0]
    return current


def properties(schema: Schema) -> Dict[str, Schema]:
    """The named fields of an object schema."""
    return dict(schema.get("properties", {}))


def required(schema: Schema) -> List[str]:
    """The fields an object schema requires, in the contract's order."""
    return list(schema.get("required", []))


def default(schema: Schema) -> Any:
    """The field's default (a copy: callers may mutate lists)."""
    if "default" not in schema:
        raise KeyError("the field has no default in the contract")
    return copy.deepcopy(schema["default"])


def enum(schema: Schema) -> List[str]:
    """The allowed values of an enum field, or the `kind` constants of a union."""
    if "enum" in schema:
        return list(schema["enum"])
    variants = schema.get("oneOf", []) + schema.get("anyOf", [])
    return [v["properties"]["kind"]["const"] for v in variants if "kind" in v.get("properties", {})]
