"""Shared base model: strict (unknown fields rejected) and finite (NaN/inf rejected) everywhere."""

from __future__ import annotations

import math
from typing import Any

from pydantic import BaseModel, ConfigDict


class StrictModel(BaseModel):
    model_config = ConfigDict(extra="forbid", allow_inf_nan=False, frozen=False)


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
