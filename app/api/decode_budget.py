"""One decoding budget shared by the concurrent uploads of an API process (issue 43): each upload reserves what
parsing and storing it may take before it starts, and an upload that does not fit is shed at once (503
`overloaded`), so eight concurrent 195 KB `.npz` files that each decompress to the per-upload cap cannot take
eight times the cap.

Bodies are streamed to a temporary file and parsed from it (app/api/routes/datasets.py), so the body itself is
never in memory and costs nothing here. What parsing an upload and storing it (a compressed .npz made in memory
while the parsed arrays are held) take, measured as the peak RSS growth (VmHWM) of a real, warmed-up API
process for one upload of 590,000 rows × 9 values (40.5 MiB once parsed), before → after the streaming:

* `.npz`: up to the per-upload cap (`max_dataset_decompressed_bytes`, checked from the members' headers before
  anything is decompressed) for the decoded arrays and one validated copy; then that copy and the stored .npz:
  `DECODED_COPIES` × the cap. A 40.5 MiB .npz: +189 → +82 MiB (the body is no longer held, and the stored .npz
  no longer copies each array twice on the way).
* CSV: read from the file a line at a time into 8-byte value buffers (a second one for an integer y), then one
  validated copy, then the stored .npz: at most `CSV_COPIES` × 8 bytes a value, about 2 measured. Its values are
  bounded from above, before the parse starts, by the separators counted as the body arrived (`csv_separators`:
  commas and line ends, plus one), and by the cap (the parse stops there). A 58.2 MiB CSV: +393 → +85 MiB
  (before: the body, its text and a 4-byte-a-character StringIO of it were held; it was costed at 10 × the
  body). A multipart CSV the same: +392 → +84 MiB.
* JSON: still parsed whole by json.loads (no bounded JSON parser is installed), a Python object a number and a
  list a row: `TEXT_EXPANSION` × its size. 45.5 MiB of 8-digit values: +267 → +222 MiB (4.9×); 41 MiB of `0.5`
  values in rows of 9, the densest case measured: +626 → +587 MiB (14.3×). That can pass twice the cap, so it
  is not capped by it (the budget itself still lets one upload alone in).
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager

from app.api.problems import Problem
from inference_core.datasets import uploads

TEXT_EXPANSION = 15  # bytes of memory per byte of JSON while it is parsed and stored
DECODED_COPIES = 2  # an .npz: the decoded arrays and the validated copy (then that copy and the stored .npz)
CSV_COPIES = 3  # a CSV: 8-byte copies of each value at most (buffers, validated copy, stored .npz), 2 measured


class DecodeBudget:
    def __init__(self, total_bytes: int):
        self.total_bytes = max(1, total_bytes)
        self.reserved = 0
        self._lock = threading.Lock()

    @staticmethod
    def cost(body_bytes: int, media_type: str, per_upload_cap: int, *, fields: int | None = None) -> int:
        """What decoding and storing a body of `body_bytes` may take in memory (module docstring). `fields` bounds
        a CSV's values (its separators + 1); without it, every value takes at least two bytes of text (a digit
        and a separator), so at most half its size plus one."""
        kind = media_type.split(";", 1)[0].strip().lower()
        if kind in uploads.NPZ_MEDIA_TYPES:
            return DECODED_COPIES * per_upload_cap
        if kind in uploads.CSV_MEDIA_TYPES:
            values = fields if fields is not None else body_bytes // 2 + 1
            return max(1, CSV_COPIES * min(per_upload_cap, uploads.VALUE_BYTES * values))
        if kind in uploads.JSON_MEDIA_TYPES:
            return max(1, TEXT_EXPANSION * body_bytes)
        return 1  # refused (415) before anything is decoded

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
