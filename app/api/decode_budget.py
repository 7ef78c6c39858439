"""One decoding budget shared by the concurrent uploads of an API process (issue 43): each upload reserves what
parsing it may take before it starts, and an upload that does not fit is shed at once (503 `overloaded`), so
eight concurrent 195 KB `.npz` files that each decompress to the per-upload cap cannot take eight times the cap.

What a parse may take, measured: a compressed `.npz` up to the decompressed-size cap (`max_dataset_decompressed_
bytes`, checked from its headers) and one copy while it is validated; JSON and CSV about ten times their size
(Python objects while parsing: 62 MiB of JSON took 550 MB), at most the same two caps."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager

from app.api.problems import Problem

TEXT_EXPANSION = 10  # bytes of memory per byte of JSON or CSV while it is parsed
DECODED_COPIES = 2  # the decoded arrays and the validated copy


class DecodeBudget:
    def __init__(self, total_bytes: int):
        self.total_bytes = max(1, total_bytes)
        self.reserved = 0
        self._lock = threading.Lock()

    @staticmethod
    def cost(body_bytes: int, media_type: str, per_upload_cap: int) -> int:
        ceiling = DECODED_COPIES * per_upload_cap
        if "npz" in media_type or "octet-stream" in media_type:
            return ceiling
        return min(ceiling, max(1, TEXT_EXPANSION * body_bytes))

    @contextmanager
    def reserve(self, nbytes: int) -> Iterator[None]:
        """Hold `nbytes` of the budget while decoding; 503 `overloaded` now if they are not free."""
        nbytes = min(nbytes, self.total_bytes)  # one upload alone always fits
        with self._lock:
            if self.reserved + nbytes > self.total_bytes:
                raise Problem(503, "overloaded", f"uploads being decoded hold {self.reserved} of this process's "
                              f"{self.total_bytes}-byte decoding budget; retry shortly", headers={"Retry-After": "1"})
            self.reserved += nbytes
        try:
            yield
        finally:
            with self._lock:
                self.reserved -= nbytes
