"""Content negotiation for numeric arrays: JSON (nested lists) or NumPy `.npy` (float32), else 406."""

from __future__ import annotations

import numpy as np
import orjson
from fastapi import Request
from fastapi.responses import Response

from app.api.problems import Problem
from app.data.arrays import load_npy, npy_bytes

__all__ = ["NPY", "JSON", "array_response", "choose_array_format", "load_npy", "npy_bytes"]

NPY = "application/x-npy"
JSON = "application/json"


def choose_array_format(request: Request) -> str:
    """"json" or "npy" from the Accept header (quality values honoured); 406 if neither is acceptable."""
    header = request.headers.get("accept", "").strip()
    if not header:
        return "json"
    best: tuple[float, str] | None = None
    for item in header.split(","):
        media, *params = (part.strip() for part in item.split(";"))
        quality = 1.0
        for param in params:
            name, _, value = param.partition("=")
            if name.strip() == "q":
                try:
                    quality = float(value)
                except ValueError:
                    quality = 0.0
        media = media.lower()
        if media == NPY:
            candidate = (quality, "npy")
        elif media in (JSON, "application/*", "*/*"):
            candidate = (quality, "json")
        else:
            continue
        if quality > 0 and (best is None or candidate[0] > best[0]):
            best = candidate
    if best is None:
        raise Problem(406, "not_acceptable", f"can answer with {JSON} or {NPY}, not {header!r}")
    return best[1]


def array_response(request: Request, array: np.ndarray, key: str, extra: dict | None = None) -> Response:
    """`{key: [[..]], "shape": [..], **extra}` as JSON (float32 values widened exactly to float64), or `.npy`.

    orjson serialises the array natively: about 15× faster than nested lists through the json module.
    """
    if choose_array_format(request) == "npy":
        return Response(npy_bytes(array), media_type=NPY)
    array = np.asarray(array, dtype=np.float32)
    body = {key: array.astype(np.float64), "shape": list(array.shape), **(extra or {})}
    return Response(orjson.dumps(body, option=orjson.OPT_SERIALIZE_NUMPY), media_type=JSON)
