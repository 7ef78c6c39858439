"""Hostile .npz files for upload tests, built without ever holding the arrays they claim in memory."""

from __future__ import annotations

import io
import zipfile

import numpy as np


def npy_header(shape: tuple[int, ...], descr: str = "<f8", fortran_order: bool = False) -> bytes:
    member = io.BytesIO()
    np.lib.format.write_array_header_1_0(member, {"descr": descr, "fortran_order": fortran_order, "shape": shape})
    return member.getvalue()


def zeros_bomb(rows: int, cols: int, key: str = "X") -> bytes:
    """A deflated .npz holding a real rows×cols float64 array of zeros (what np.savez_compressed writes), its
    data streamed in 1 MiB chunks: 10,000 × 10,000 (800 MB) compresses to under 1 MB."""
    buffer = io.BytesIO()
    chunk = bytes(1 << 20)
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as archive, \
            archive.open(f"{key}.npy", "w", force_zip64=True) as member:
        member.write(npy_header((rows, cols)))
        left = rows * cols * 8
        while left:
            member.write(chunk[:min(left, len(chunk))])
            left -= min(left, len(chunk))
    return buffer.getvalue()


def lying_header(shape: tuple[int, ...], payload: bytes = b"", key: str = "X") -> bytes:
    """An .npz whose member's header claims `shape` but whose data is `payload`."""
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as archive:
        archive.writestr(f"{key}.npy", npy_header(shape) + payload)
    return buffer.getvalue()


def small_npz(X: np.ndarray, y: np.ndarray | None = None) -> bytes:
    buffer = io.BytesIO()
    np.savez_compressed(buffer, **({"X": X} if y is None else {"X": X, "y": y}))
    return buffer.getvalue()
