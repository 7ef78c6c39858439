"""Method state ⇄ safetensors bytes. Never pickle: tensors go in the safetensors body, everything else
(ints, floats, strings, nesting, optimizer param-group settings) in a JSON description in its metadata."""

from __future__ import annotations

import json
from typing import Any

import torch
from safetensors.torch import load as load_safetensors
from safetensors.torch import save as save_safetensors

_STRUCTURE_KEY = "parvis_structure"


def _encode(value: Any, tensors: dict[str, torch.Tensor]) -> Any:
    if isinstance(value, torch.Tensor):
        key = f"t{len(tensors)}"
        tensors[key] = value.detach().cpu().contiguous().clone()
        return {"t": key}
    if isinstance(value, dict):
        if all(isinstance(k, str) for k in value):
            return {"d": {k: _encode(v, tensors) for k, v in value.items()}}
        return {"di": [[k, _encode(v, tensors)] for k, v in value.items()]}
    if isinstance(value, list):
        return {"l": [_encode(v, tensors) for v in value]}
    if isinstance(value, tuple):
        return {"tu": [_encode(v, tensors) for v in value]}
    if value is None or isinstance(value, bool | int | float | str):
        return {"v": value}
    raise TypeError(f"cannot serialise a {type(value).__name__} in method state")


def _decode(node: Any, tensors: dict[str, torch.Tensor]) -> Any:
    (tag, body), = node.items()
    if tag == "t":
        return tensors[body]
    if tag == "d":
        return {k: _decode(v, tensors) for k, v in body.items()}
    if tag == "di":
        return {k: _decode(v, tensors) for k, v in body}
    if tag == "l":
        return [_decode(v, tensors) for v in body]
    if tag == "tu":
        return tuple(_decode(v, tensors) for v in body)
    if tag == "v":
        return body
    raise ValueError(f"unknown node tag {tag!r} in serialised state")


def state_to_bytes(state: dict[str, Any]) -> bytes:
    tensors: dict[str, torch.Tensor] = {}
    structure = _encode(state, tensors)
    return save_safetensors(tensors, metadata={_STRUCTURE_KEY: json.dumps(structure)})


def state_from_bytes(data: bytes) -> dict[str, Any]:
    tensors = load_safetensors(data)
    header_len = int.from_bytes(data[:8], "little")
    metadata = json.loads(data[8 : 8 + header_len]).get("__metadata__", {})
    return _decode(json.loads(metadata[_STRUCTURE_KEY]), tensors)
