"""Shared base model: strict (unknown fields rejected, no type coercion) and finite (NaN/inf rejected) everywhere."""

from __future__ import annotations

import math
from typing import Any

from pydantic import BaseModel, ConfigDict, Strict


class StrictModel(BaseModel):
    """`strict=True`: a JSON string or boolean is never taken as a number ("10", true → 422), nor a number as a
    boolean; a JSON integer is still a valid float. Tuple fields parsed from JSON arrays use `JsonTuple`."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False, frozen=False, strict=True)


#: Marks a tuple field lax about its container only: strict mode refuses a list for a tuple, and JSON has only
#: lists; the items keep the model's strictness. Use as `Annotated[tuple[float, float], JsonTuple]`.
JsonTuple = Strict(False)


def find_nonfinite(value: Any, path: tuple = ()) -> tuple | None:
    """Location of the first NaN/inf float inside nested dicts/lists, or None.

    Free-form dicts (method options, params) bypass pydantic's float checks, so specs are scanned once.
    """
    if isinstance(value, float):
        return None if math.isfinite(value) else path
    if isinstance(value, dict):
        for key, item in value.items():
            found = find_nonfinite(item, (*path, key))
            if found is not None:
                return found
    elif isinstance(value, list | tuple):
        for index, item in enumerate(value):
            found = find_nonfinite(item, (*path, index))
            if found is not None:
                return found
    return None
