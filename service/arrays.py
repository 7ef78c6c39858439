"""Numeric arrays as NumPy `.npy` bytes (float32, never pickled) — the wire and storage format."""

from __future__ import annotations

import io

import numpy as np


def npy_bytes(array: np.ndarray) -> bytes:
    buffer = io.BytesIO()
    np.save(buffer, np.ascontiguousarray(array, dtype=np.float32), allow_pickle=False)
    return buffer.getvalue()


def load_npy(data: bytes) -> np.ndarray:
    return np.load(io.BytesIO(data), allow_pickle=False)
