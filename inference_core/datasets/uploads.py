"""Uploaded data sets (POST /v1/datasets): parsing JSON, .npz and CSV bodies, storage as .npz, digests.

Every rejection is a ValueError whose message says exactly what is wrong (the API answers 422 with it);
an unknown media type is `UnsupportedMediaType` (a ValueError; the API may answer 415). Nothing is unpickled:
.npz members are read with `allow_pickle=False` after their headers (dtype, shape) have been checked against
the caps, so a small compressed file cannot expand into a huge array.

Formats (see `parse_dataset_upload`):

* JSON: `{"X": [[..], ..], "y": [..]}`; `y` optional; optional `X_test`, `y_test` (a held-out part).
  Numbers only: booleans, strings, null, NaN/Infinity are rejected. `y` given as JSON integers becomes int64
  labels, otherwise float64.
* .npz: arrays `X` and optionally `y`, `X_test`, `y_test` (no other members). Real dtypes only (integer or
  float); object, string, boolean, complex and structured arrays are rejected. Integer `y` stays int64 labels.
* CSV: comma-separated, UTF-8, one example per line. The first line is a header when any of its fields is
  not a number (or force it with `header=True/False`). `target_column` picks y: the last column by default
  (−1), any index (negative counts from the end), a header name, or None for a file with no y. Integers-only
  y columns become int64 labels. Empty fields, NaN and infinity are rejected; blank lines are skipped.

Caps: `max_rows` bounds the rows of X and X_test together, `max_cols` the number of feature columns, and
`max_bytes` the memory the parsed arrays may take (every value counted at 8 bytes at least, as it is held once
parsed): over it, `DatasetTooLarge` (a ValueError; the API answers 413). For an .npz this is decided from each
member's .npy header alone, before any data is decompressed, and the decompressed stream is read through a
counter that stops past the header's promise, whatever the zip declares (a decompression bomb reads nothing).
A JSON body is bounded before it is decoded, by counting the runs of number characters in its bytes.
The zip's central directory is bounded too (zipfile parses it whole). CSV values are converted as each line is
read, so the text is never held as millions of small strings.

Sources: the body is given as bytes, a path, or a seekable binary file (the API streams a body into a temporary
file and parses from it, so the raw body is never held in memory). An .npz and a CSV are read from the file a
chunk at a time: memory is about the parsed arrays. A JSON body is read whole (json.loads needs the text), then
its bytes are dropped before it is decoded.
"""

from __future__ import annotations

import codecs
import csv
import hashlib
import io
import json
import lzma
import math
import os
import re
import struct
import zipfile
import zlib
from array import array as value_buffer
from collections.abc import Iterator
from contextlib import contextmanager
from functools import partial
from typing import IO, Any

import numpy as np

from inference_core.datasets.dataset import Dataset

JSON_MEDIA_TYPES = frozenset({"application/json"})
NPZ_MEDIA_TYPES = frozenset(
    {"application/x-npz", "application/npz", "application/zip", "application/x-zip-compressed",
     "application/octet-stream"}
)
CSV_MEDIA_TYPES = frozenset({"text/csv", "application/csv"})
ARRAY_KEYS = ("X", "y", "X_test", "y_test")

_NUMBER = re.compile(r"[+-]?(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?")
_INTEGER = re.compile(r"[+-]?\d+")
_FIXED_ZIP_TIME = (1980, 1, 1, 0, 0, 0)
_INT64_MAX = np.iinfo(np.int64).max


VALUE_BYTES = 8  # a parsed value's memory, at least (X becomes float64, y float64 or int64)
MAX_NPY_HEADER_BYTES = 10_000 + 12  # numpy's own max_header_size, plus magic and length fields
MAX_ZIP_DIRECTORY_BYTES = 64 * 1024  # a real .npz (at most 5 members) needs well under 1 KiB
_READ_CHUNK = 1 << 20


class UnsupportedMediaType(ValueError):
    """The body's media type is none of the supported formats."""


class DatasetTooLarge(ValueError):
    """The parsed arrays would take more than `max_bytes` of memory (the API answers 413)."""


UploadSource = bytes | os.PathLike[str] | IO[bytes]
"""An upload's body: its bytes, the path of a file holding them, or a seekable binary file (read from its start)."""


@contextmanager
def _opened(source: UploadSource) -> Iterator[IO[bytes]]:
    """The body as a seekable binary file at its start (bytes are wrapped without a copy; a path is opened and
    closed again; a given file is left open)."""
    if isinstance(source, bytes | bytearray | memoryview):
        yield io.BytesIO(source)
    elif isinstance(source, os.PathLike):
        with open(source, "rb") as handle:
            yield handle
    else:
        source.seek(0)
        yield source


def _size(handle: IO[bytes]) -> int:
    size = handle.seek(0, io.SEEK_END)
    handle.seek(0)
    return size


def parse_dataset_upload(
    data: UploadSource,
    media_type: str,
    *,
    max_rows: int,
    max_cols: int,
    target_column: int | str | None = -1,
    header: bool | None = None,
    name: str = "upload",
    max_bytes: int | None = None,
) -> Dataset:
    """Parse an uploaded body (bytes, a path or a seekable binary file: `UploadSource`) into a validated Dataset
    (formats and caps in the module docstring).

    `target_column` and `header` apply to CSV only; `max_bytes` None means no memory cap.
    """
    if max_rows < 1 or max_cols < 1:
        raise ValueError("max_rows and max_cols must be at least 1")
    kind = media_type.split(";", 1)[0].strip().lower()
    with _opened(data) as handle:
        if not _size(handle):
            raise ValueError("the upload is empty")
        if kind in JSON_MEDIA_TYPES:
            arrays = _parse_json(handle, max_rows=max_rows, max_cols=max_cols, max_bytes=max_bytes)
        elif kind in NPZ_MEDIA_TYPES:
            arrays = _read_npz(handle, allowed=ARRAY_KEYS, max_rows=max_rows, max_cols=max_cols,
                               max_bytes=max_bytes)
        elif kind in CSV_MEDIA_TYPES:
            arrays = _parse_csv(handle, max_rows=max_rows, max_cols=max_cols, target_column=target_column,
                                header=header, max_bytes=max_bytes)
        else:
            supported = sorted(JSON_MEDIA_TYPES | NPZ_MEDIA_TYPES | CSV_MEDIA_TYPES)
            raise UnsupportedMediaType(f"unsupported media type {kind!r}; use one of {', '.join(supported)}")
    if "X" not in arrays:
        raise ValueError("the upload has no 'X' (the feature matrix is required)")
    return Dataset(name=name, **arrays)


def csv_separators(chunk: bytes) -> int:
    """Separators (commas, line feeds, carriage returns) in a piece of a CSV body. Summed over the body, plus one,
    they bound the fields it holds from above (every field but the last ends at one; quoted ones only add to
    the count), so the values its parsed arrays can hold. Counted while a body is received, this sizes its parse
    before it starts (app/api/decode_budget.py)."""
    return chunk.count(b",") + chunk.count(b"\n") + chunk.count(b"\r")


# ----------------------------------------------------------------------------------------------- JSON


def _json_type(value: Any) -> str:
    if isinstance(value, bool):
        return "a boolean"
    if value is None:
        return "null"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, list):
        return "an array"
    if isinstance(value, dict):
        return "an object"
    return type(value).__name__


def _is_number(value: Any) -> bool:
    return type(value) is int or type(value) is float  # bool is a subclass of int: excluded on purpose


def _reject_constant(token: str) -> None:
    raise ValueError(f"the JSON contains {token}; only finite numbers are allowed")


def _too_large(what: str, n_bytes: int, max_bytes: int) -> DatasetTooLarge:
    return DatasetTooLarge(f"{what} would take {n_bytes:,} bytes in memory once parsed; the cap is "
                           f"{max_bytes:,} bytes (PARVIS_MAX_DATASET_DECOMPRESSED_BYTES)")


# Bytes a JSON number is written with: every number is one maximal run of them (so the runs bound the numbers
# from above; the only other runs are inside strings and literals, e.g. the `e` of "X_test" or `true`).
_JSON_NUMBER_BYTES = np.zeros(256, dtype=bool)
_JSON_NUMBER_BYTES[np.frombuffer(b"0123456789+-.eE", dtype=np.uint8)] = True


def _json_number_bound(data: bytes) -> int:
    """An upper bound on the numbers in a JSON text, from its bytes alone (runs of number characters), in
    chunks: a few MiB of scratch memory whatever the size, where decoding would make a Python object a value."""
    view = np.frombuffer(data, dtype=np.uint8)
    count, previous = 0, False
    for start in range(0, view.size, _READ_CHUNK):
        inside = _JSON_NUMBER_BYTES[view[start:start + _READ_CHUNK]]
        count += int(bool(inside[0]) and not previous) + int(np.count_nonzero(inside[1:] & ~inside[:-1]))
        previous = bool(inside[-1])
    return count


def _json_text(handle: IO[bytes], max_bytes: int | None) -> str:
    """The JSON body as text, its bytes dropped once decoded (they are never held beside the Python objects)."""
    data = handle.read()
    # Over the cap before anything is decoded: json.loads holds every value as a Python object (~4 times the
    # 8 bytes counted), so a body far over the cap must not get that far.
    if max_bytes is not None and (bound := _json_number_bound(data) * VALUE_BYTES) > max_bytes:
        raise _too_large("the data set", bound, max_bytes)
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError:
        raise ValueError("the JSON body is not valid UTF-8") from None


def _parse_json(handle: IO[bytes], *, max_rows: int, max_cols: int, max_bytes: int | None
                ) -> dict[str, np.ndarray]:
    try:
        document = json.loads(_json_text(handle, max_bytes), parse_constant=_reject_constant)
    except RecursionError:
        raise ValueError("the JSON is nested too deeply") from None
    except json.JSONDecodeError as exc:
        raise ValueError(f"the body is not valid JSON: {exc.msg} (line {exc.lineno}, column {exc.colno})") from None
    if not isinstance(document, dict):
        raise ValueError(f"the JSON must be an object like {{\"X\": [[..]], \"y\": [..]}}, got {_json_type(document)}")
    unknown = sorted(set(document) - set(ARRAY_KEYS))
    if unknown:
        raise ValueError(f"unknown key(s) {', '.join(map(repr, unknown))}; allowed: X, y, X_test, y_test")
    n_bytes = _json_value_count(document) * VALUE_BYTES
    if max_bytes is not None and n_bytes > max_bytes:
        raise _too_large("the data set", n_bytes, max_bytes)
    arrays: dict[str, np.ndarray] = {}
    rows_left = max_rows
    for key in ("X", "X_test"):
        if key in document:
            arrays[key] = _json_matrix(document[key], key, rows_left, max_cols, max_rows)
            rows_left -= arrays[key].shape[0]
    for key in ("y", "y_test"):
        if key in document:
            arrays[key] = _json_vector(document[key], key)
    return arrays


def _json_value_count(document: dict[str, Any]) -> int:
    """The values the arrays would hold (each matrix counted as rows × the first row's width), checked before
    any array is built; shapes themselves are checked afterwards."""
    count = 0
    for value in document.values():
        if isinstance(value, list):
            first = value[0] if value else None
            count += len(value) * (len(first) if isinstance(first, list) else 1)
    return count


def _json_matrix(value: Any, name: str, rows_left: int, max_cols: int, max_rows: int) -> np.ndarray:
    if not isinstance(value, list):
        raise ValueError(f"{name} must be an array of rows (arrays of numbers), got {_json_type(value)}")
    if not value:
        raise ValueError(f"{name} is empty; it needs at least one row")
    if len(value) > rows_left:
        raise ValueError(f"too many rows: {name} has {len(value)}, the cap is {max_rows} rows in all")
    width = None
    for row_index, row in enumerate(value):
        if not isinstance(row, list):
            raise ValueError(f"{name}[{row_index}] must be an array of numbers, got {_json_type(row)}")
        if width is None:
            width = len(row)
            if width == 0:
                raise ValueError(f"{name}[0] is empty; rows need at least one number")
            if width > max_cols:
                raise ValueError(f"too many columns: {name} has {width}, the cap is {max_cols}")
        elif len(row) != width:
            raise ValueError(f"{name} has ragged rows: row {row_index} has {len(row)} values, row 0 has {width}")
        for column, item in enumerate(row):
            if not _is_number(item):
                raise ValueError(f"{name}[{row_index}][{column}] must be a number, got {_json_type(item)}")
    try:
        return np.array(value, dtype=np.float64)
    except OverflowError:
        raise ValueError(f"{name} has an integer too large for float64") from None


def json_matrix(value: Any, name: str, *, max_rows: int, max_cols: int) -> np.ndarray:
    """A JSON-decoded list of rows → float64 matrix, with the same checks and messages as an upload."""
    return _json_matrix(value, name, max_rows, max_cols, max_rows)


def json_vector(value: Any, name: str) -> np.ndarray:
    """A JSON-decoded list of numbers → int64 (all integers) or float64 vector, with the upload's checks."""
    return _json_vector(value, name)


def _json_vector(value: Any, name: str) -> np.ndarray:
    if not isinstance(value, list):
        raise ValueError(f"{name} must be an array of numbers, got {_json_type(value)}")
    for index, item in enumerate(value):
        if not _is_number(item):
            raise ValueError(f"{name}[{index}] must be a number, got {_json_type(item)}")
    if value and all(type(item) is int for item in value):
        if any(abs(item) > _INT64_MAX for item in value):
            raise ValueError(f"{name} has an integer outside the int64 range")
        return np.array(value, dtype=np.int64)
    try:
        return np.array(value, dtype=np.float64)
    except OverflowError:
        raise ValueError(f"{name} has an integer too large for float64") from None


# ------------------------------------------------------------------------------------------------ NPZ


def _check_member(key: str, dtype: np.dtype, shape: tuple[int, ...], rows_left: int | None,
                  max_cols: int | None, max_rows: int | None) -> None:
    if dtype.hasobject:
        raise ValueError(f"{key} is an object array; only numeric arrays are allowed (no pickles)")
    if key == "name":
        if dtype != np.uint8 or len(shape) != 1:
            raise ValueError("name must be a 1-D uint8 array (UTF-8 bytes)")
        return
    if dtype.fields is not None:
        raise ValueError(f"{key} is a structured array; only plain numeric arrays are allowed")
    if dtype.kind == "b":
        raise ValueError(f"{key} holds booleans; encode them as the numbers 0 and 1")
    if dtype.kind == "c":
        raise ValueError(f"{key} holds complex numbers; only real numbers are allowed")
    if dtype.kind not in "fiu":
        raise ValueError(f"{key} must hold real numbers, got dtype {dtype.str!r}")
    matrix = key.startswith("X")
    if len(shape) != (2 if matrix else 1):
        expected = "a 2-D array [rows, features]" if matrix else "a 1-D array"
        raise ValueError(f"{key} must be {expected}, got shape {list(shape)}")
    if matrix and rows_left is not None and shape[0] > rows_left:
        raise ValueError(f"too many rows: {key} has {shape[0]}, the cap is {max_rows} rows in all")
    if matrix and max_cols is not None and shape[1] > max_cols:
        raise ValueError(f"too many columns: {key} has {shape[1]}, the cap is {max_cols}")
    if not matrix and max_rows is not None and shape[0] > max_rows:
        raise ValueError(f"too many rows: {key} has {shape[0]} entries, the cap is {max_rows}")


class _BoundedStream:
    """A zip member's decompressed stream that refuses to give more than `limit` bytes in all: the caps hold
    whatever sizes the zip or the .npy header declare. Going past the limit is a malformed member (422): the
    limit is the header's own promise, already checked against the caps."""

    def __init__(self, handle: Any, limit: int, key: str):
        self.handle, self.limit, self.key = handle, limit, key
        self.consumed = 0
        self.overrun = f"its .npy header is longer than {MAX_NPY_HEADER_BYTES:,} bytes"

    def read(self, size: int = -1) -> bytes:
        allowed = self.limit - self.consumed + 1  # one byte more than allowed tells "too long"
        data = self.handle.read(allowed if size is None or size < 0 else min(size, allowed))
        self.consumed += len(data)
        if self.consumed > self.limit:
            raise ValueError(f"{self.key} in the .npz is malformed: {self.overrun}")
        return data


def _read_header(stream: Any) -> tuple[tuple[int, ...], np.dtype, bool]:
    version = np.lib.format.read_magic(stream)
    if version == (1, 0):
        shape, fortran_order, dtype = np.lib.format.read_array_header_1_0(stream)
    elif version == (2, 0):
        shape, fortran_order, dtype = np.lib.format.read_array_header_2_0(stream)
    else:
        raise ValueError(f"unsupported .npy format version {version}")
    if any(int(n) < 0 for n in shape):
        raise ValueError(f"negative dimension in shape {list(shape)}")
    return tuple(int(n) for n in shape), np.dtype(dtype), bool(fortran_order)


def _read_data(stream: _BoundedStream, key: str, shape: tuple[int, ...], dtype: np.dtype,
               fortran_order: bool) -> np.ndarray:
    """Exactly the bytes the header promises, in chunks, into an array allocated from the checked header."""
    count = math.prod(shape)
    out = np.empty(count, dtype=dtype)
    view = memoryview(out.view(np.uint8).reshape(-1)) if out.nbytes else memoryview(b"")
    stream.limit = stream.consumed + out.nbytes
    stream.overrun = "it holds more data than its .npy header declares"
    filled = 0
    while filled < out.nbytes:
        chunk = stream.read(min(_READ_CHUNK, out.nbytes - filled))
        if not chunk:
            raise ValueError(f"{key} is truncated in the .npz ({filled} of {out.nbytes} data bytes)")
        view[filled:filled + len(chunk)] = chunk
        filled += len(chunk)
    stream.read(1)  # past the end: raises if the member has more bytes; at EOF zipfile checks the CRC
    return out.reshape(shape[::-1]).transpose() if fortran_order else out.reshape(shape)


_MALFORMED = (ValueError, zipfile.BadZipFile, zlib.error, lzma.LZMAError, OSError, EOFError, NotImplementedError,
              RuntimeError, struct.error, TypeError, SyntaxError, UnicodeDecodeError, OverflowError)
"""What reading a malformed archive or .npy can raise (encrypted member: RuntimeError; unknown compression:
NotImplementedError; a header numpy cannot parse: ValueError or SyntaxError)."""


def _central_directory_size(handle: IO[bytes]) -> int | None:
    """The size the zip declares for its central directory (zip64 too), or None when no end record is found
    (zipfile then rejects the file). Only the file's tail is read: the end record (22 bytes and a comment of at
    most 0xFFFF), the zip64 locator (20) and the zip64 end record (56) before it."""
    size = _size(handle)
    handle.seek(max(0, size - 22 - 0xFFFF - 20 - 56))
    data = handle.read()
    end = data.rfind(b"PK\x05\x06", max(0, len(data) - 22 - 0xFFFF))
    if end < 0 or end + 22 > len(data):
        return None
    size = struct.unpack_from("<I", data, end + 12)[0]
    locator = end - 20
    if size == 0xFFFFFFFF and locator >= 56 and data[locator:locator + 4] == b"PK\x06\x07":
        record = locator - 56
        if data[record:record + 4] == b"PK\x06\x06":
            size = struct.unpack_from("<Q", data, record + 40)[0]
    return size


def _read_npz(handle: IO[bytes], *, allowed: tuple[str, ...], max_rows: int | None,
              max_cols: int | None, max_bytes: int | None = None) -> dict[str, np.ndarray]:
    """Members of an .npz archive (a seekable binary file), each header checked (dtype, shape, then bytes against
    `max_bytes`) before its data is read, and its data read through a counter that stops where the header says
    it ends."""
    handle.seek(0)
    if handle.read(2) != b"PK":
        raise ValueError("not an .npz file (expected a zip archive of .npy arrays)")
    directory = _central_directory_size(handle)
    if directory is not None and directory > MAX_ZIP_DIRECTORY_BYTES:
        raise ValueError(f"the .npz's zip directory declares {directory:,} bytes; an .npz of at most "
                         f"{len(allowed)} arrays needs far less")
    try:
        archive = zipfile.ZipFile(handle)
    except _MALFORMED:
        raise ValueError("the .npz file is not a valid zip archive") from None
    with archive:
        members = archive.infolist()
        keys = []
        for member in members:
            if not member.filename.endswith(".npy"):
                raise ValueError(f"unexpected member {member.filename!r} in the .npz (only .npy arrays)")
            keys.append(member.filename[: -len(".npy")])
        unknown = sorted(set(keys) - set(allowed))
        if unknown:
            raise ValueError(f"unknown array(s) {', '.join(map(repr, unknown))} in the .npz; "
                             f"allowed: {', '.join(allowed)}")
        if len(set(keys)) != len(keys):
            raise ValueError("the .npz has the same array name twice")
        order = sorted(range(len(keys)), key=lambda i: (not keys[i].startswith("X"), keys[i]))
        arrays: dict[str, np.ndarray] = {}
        rows_left = max_rows
        bytes_left = max_bytes
        for index in order:
            key, member = keys[index], members[index]
            if bytes_left is not None and member.file_size > bytes_left + MAX_NPY_HEADER_BYTES:
                raise DatasetTooLarge(f"{key} in the .npz declares {member.file_size:,} bytes once decompressed; "
                                      f"the cap is {max_bytes:,} bytes (PARVIS_MAX_DATASET_DECOMPRESSED_BYTES)")
            handle = _guarded(partial(archive.open, member), f"could not read {key} from the .npz")
            with handle:
                stream = _BoundedStream(handle, MAX_NPY_HEADER_BYTES, key)
                shape, dtype, fortran_order = _guarded(partial(_read_header, stream),
                                                       f"could not read the header of {key} in the .npz")
                _check_member(key, dtype, shape, rows_left, max_cols, max_rows)
                n_bytes = math.prod(shape) * max(dtype.itemsize, VALUE_BYTES)
                if bytes_left is not None and n_bytes > bytes_left:
                    raise _too_large(f"{key} (shape {list(shape)}, dtype {dtype.str}) in the .npz", n_bytes,
                                     max_bytes)
                array = _guarded(partial(_read_data, stream, key, shape, dtype, fortran_order),
                                 f"could not read {key} from the .npz")
            if key.startswith("X") and rows_left is not None:
                rows_left -= shape[0]
            if bytes_left is not None:
                bytes_left -= n_bytes
            arrays[key] = array
    return arrays


def check_npz_declared_size(data: UploadSource, max_bytes: int) -> None:
    """`DatasetTooLarge` when a .npz's zip directory alone declares more decompressed bytes than the cap (its
    arrays' headers aside): a check that reads only the directory, so the caller can refuse such an upload before
    it reserves any decoding budget. Anything else (a malformed archive too) is left to `parse_dataset_upload`,
    which checks each member's real size as it reads it."""
    with _opened(data) as handle:
        try:
            with zipfile.ZipFile(handle) as archive:
                members = archive.infolist()
        except _MALFORMED:
            return
        finally:
            handle.seek(0)
    declared = sum(member.file_size for member in members)
    if declared > max_bytes + len(members) * MAX_NPY_HEADER_BYTES:
        raise DatasetTooLarge(f"the .npz declares {declared:,} bytes once decompressed; the cap is {max_bytes:,} "
                              "bytes (PARVIS_MAX_DATASET_DECOMPRESSED_BYTES)")


def _guarded(read: Any, what: str) -> Any:
    """`read()`, with any malformed-input failure turned into one ValueError naming `what`."""
    try:
        return read()
    except DatasetTooLarge:
        raise
    except _MALFORMED as exc:
        raise ValueError(f"{what}: {exc}") from None


# ------------------------------------------------------------------------------------------------ CSV


def _check_utf8(handle: IO[bytes]) -> None:
    """ValueError unless the whole file is UTF-8, read a chunk at a time (before any line is parsed, so a file
    that is not UTF-8 is told so whatever else is wrong in it)."""
    decoder = codecs.getincrementaldecoder("utf-8")()
    handle.seek(0)
    try:
        while chunk := handle.read(_READ_CHUNK):
            decoder.decode(chunk)
        decoder.decode(b"", final=True)
    except UnicodeDecodeError:
        raise ValueError("the CSV is not valid UTF-8") from None
    handle.seek(0)


def _parse_csv(handle: IO[bytes], *, max_rows: int, max_cols: int, target_column: int | str | None,
               header: bool | None, max_bytes: int | None = None) -> dict[str, np.ndarray]:
    _check_utf8(handle)
    text = io.TextIOWrapper(handle, encoding="utf-8-sig", newline="")  # decodes a chunk at a time
    try:
        return _parse_csv_lines(text, max_rows=max_rows, max_cols=max_cols, target_column=target_column,
                                header=header, max_bytes=max_bytes)
    except UnicodeDecodeError:  # checked above; only a file changed under us gets here
        raise ValueError("the CSV is not valid UTF-8") from None
    finally:
        text.detach()  # the caller's file stays open


def _parse_csv_lines(text: IO[str], *, max_rows: int, max_cols: int, target_column: int | str | None,
                     header: bool | None, max_bytes: int | None) -> dict[str, np.ndarray]:
    reader = csv.reader(text, strict=True)
    # Values are converted line by line into compact buffers (8 bytes each), never kept as strings.
    features, y_float, y_int = value_buffer("d"), value_buffer("d"), value_buffer("q")
    y_integers = True
    names: list[str] | None = None
    width = 0
    n_rows = 0
    target: int | None = None
    feature_columns: list[int] = []
    try:
        for record in reader:
            fields = [field.strip() for field in record]
            if not any(fields):
                continue  # blank line
            if not width:
                width = len(fields)
                is_header = header if header is not None else not all(_NUMBER.fullmatch(f) for f in fields)
                target = _target_index(target_column, width, fields if is_header else None)
                feature_columns = [column for column in range(width) if column != target]
                if not feature_columns:
                    raise ValueError("the CSV has no feature columns (its only column is the target; pass "
                                     "target_column=None for a file without y)")
                if len(feature_columns) > max_cols:
                    raise ValueError(f"too many columns: {len(feature_columns)} feature columns, the cap is {max_cols}")
                if is_header:
                    names = fields
                    continue
            if len(fields) != width:
                raise ValueError(f"ragged rows: line {reader.line_num} has {len(fields)} fields, "
                                 f"the first line has {width}")
            if n_rows == max_rows:
                raise ValueError(f"too many rows: more than the cap of {max_rows}")
            if max_bytes is not None and (n_rows + 1) * width * VALUE_BYTES > max_bytes:
                raise _too_large(f"the CSV (more than {n_rows:,} rows of {width} values)",
                                 (n_rows + 1) * width * VALUE_BYTES, max_bytes)
            for column in feature_columns:
                features.append(_csv_number(fields[column], n_rows, column, names))
            if target is not None:
                token = fields[target]
                y_float.append(_csv_number(token, n_rows, target, names))
                if y_integers and _INTEGER.fullmatch(token) and abs(int(token)) <= _INT64_MAX:
                    y_int.append(int(token))
                else:
                    y_integers = False
            n_rows += 1
    except csv.Error as exc:
        raise ValueError(f"the CSV is malformed at line {reader.line_num}: {exc}") from None
    if not n_rows:
        raise ValueError("the CSV has no data rows" + (" (only a header)" if names is not None else ""))
    arrays = {"X": np.frombuffer(features, dtype=np.float64).reshape(n_rows, len(feature_columns))}
    if target is not None:
        arrays["y"] = np.frombuffer(y_int, dtype=np.int64) if y_integers else np.frombuffer(y_float, dtype=np.float64)
    return arrays


def _column_label(column: int, names: list[str] | None) -> str:
    return f"column {column}" + (f" ({names[column]!r})" if names is not None else "")


def _csv_number(token: str, row: int, column: int, names: list[str] | None) -> float:
    where = f"data row {row}, {_column_label(column, names)}"
    if not token:
        raise ValueError(f"{where} is empty (missing values are not supported)")
    if _NUMBER.fullmatch(token) is None:
        raise ValueError(f"{where}: {token[:40]!r} is not a number")
    value = float(token)
    if not math.isfinite(value):
        raise ValueError(f"{where}: {token[:40]!r} is not a finite float64 number")
    return value


def _target_index(target_column: int | str | None, width: int, names: list[str] | None) -> int | None:
    if target_column is None:
        return None
    if isinstance(target_column, bool) or not isinstance(target_column, int | str):
        raise ValueError("target_column must be a column index, a header name, or None")
    if isinstance(target_column, str):
        if names is None:
            raise ValueError(f"target_column {target_column!r} is a name, but the CSV has no header row")
        matches = [index for index, name in enumerate(names) if name == target_column]
        if len(matches) != 1:
            problem = "is not a column" if not matches else "names more than one column"
            raise ValueError(f"target_column {target_column!r} {problem} of the header {names}")
        return matches[0]
    if not -width <= target_column < width:
        raise ValueError(f"target_column {target_column} is out of range for {width} columns")
    return target_column % width


# ------------------------------------------------------------------------------------------- storage


def dataset_to_npz(dataset: Dataset) -> bytes:
    """Storage form: a deflated .npz of X, y, X_test, y_test (those present) and the name (UTF-8 bytes).

    Deterministic: the same Dataset always gives the same bytes (fixed member order and timestamps).
    """
    members = {**dataset.arrays(), "name": np.frombuffer(dataset.name.encode("utf-8"), dtype=np.uint8)}
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", compression=zipfile.ZIP_DEFLATED) as archive:
        for key, array in members.items():
            array = np.ascontiguousarray(array)
            header = io.BytesIO()
            np.lib.format.write_array_header_1_0(header, np.lib.format.header_data_from_array_1_0(array))
            info = zipfile.ZipInfo(f"{key}.npy", date_time=_FIXED_ZIP_TIME)
            info.compress_type = zipfile.ZIP_DEFLATED
            info.file_size = header.tell() + array.nbytes  # as writestr sets it (zip64 or not), same bytes
            # The .npy bytes np.save writes, compressed as they are written a chunk at a time: no uncompressed
            # copy of the array is made (np.lib.format.write_array would copy 16 MiB chunks twice over).
            data = memoryview(array.reshape(-1).view(np.uint8))
            with archive.open(info, "w") as member:
                member.write(header.getvalue())
                for start in range(0, len(data), _READ_CHUNK):
                    member.write(data[start:start + _READ_CHUNK])
    return buffer.getvalue()


def dataset_from_npz(data: bytes) -> Dataset:
    """Inverse of `dataset_to_npz` (bit-exact arrays; read with allow_pickle=False and re-validated)."""
    arrays = _read_npz(io.BytesIO(data), allowed=(*ARRAY_KEYS, "name"), max_rows=None, max_cols=None)
    name_bytes = arrays.pop("name", np.zeros(0, dtype=np.uint8))
    try:
        name = name_bytes.tobytes().decode("utf-8")
    except UnicodeDecodeError:
        raise ValueError("the stored name is not valid UTF-8") from None
    if "X" not in arrays:
        raise ValueError("the .npz has no 'X'")
    return Dataset(name=name, **arrays)


def dataset_digest(dataset: Dataset) -> str:
    """sha256 (hex) of the arrays' content: for each of X, y, X_test, y_test present, its name, dtype and
    shape, then its little-endian C-order bytes. The name does not enter: equal data, equal digest."""
    digest = hashlib.sha256()
    for key, array in dataset.arrays().items():
        little = np.ascontiguousarray(array, dtype=array.dtype.newbyteorder("<"))
        digest.update(f"{key}|{little.dtype.str}|{list(little.shape)}\n".encode())
        digest.update(little.tobytes())
    return digest.hexdigest()
