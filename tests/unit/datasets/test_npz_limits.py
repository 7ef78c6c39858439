"""Upload memory caps: .npz headers are checked before any data is decompressed, the decompressed stream is
counted, and no malformed archive raises anything but a ValueError (the API's 413/422, never a 500)."""

from __future__ import annotations

import io
import json
import random
import struct
import tracemalloc
import zipfile

import numpy as np
import pytest

from inference_core.datasets import DatasetTooLarge, parse_dataset_upload
from inference_core.datasets.uploads import MAX_ZIP_DIRECTORY_BYTES
from tests.support.npz_bombs import lying_header, npy_header, small_npz, zeros_bomb

CAPS = {"max_rows": 2_000_000, "max_cols": 10_000}
MiB = 1024 * 1024


def parse_npz(data: bytes, max_bytes: int | None = 16 * MiB):
    return parse_dataset_upload(data, "application/x-npz", max_bytes=max_bytes, **CAPS)


def test_a_zeros_bomb_is_refused_from_its_header_without_allocating() -> None:
    bomb = zeros_bomb(4000, 4000)  # 128 MB of float64 in ~125 KB
    assert len(bomb) < 200_000
    tracemalloc.start()
    try:
        with pytest.raises(DatasetTooLarge, match=r"X in the .npz declares 128,000,128 bytes once decompressed"):
            parse_npz(bomb)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 4 * MiB, f"{peak} bytes were allocated to refuse the bomb"


def test_the_cap_counts_every_member_and_at_least_8_bytes_a_value() -> None:
    X = np.ones((100, 10), dtype=np.int8)  # 1,000 values: 8,000 bytes once held as float64
    assert parse_npz(small_npz(X), max_bytes=8_000).X.shape == (100, 10)
    with pytest.raises(DatasetTooLarge, match="8,000 bytes"):
        parse_npz(small_npz(X), max_bytes=7_999)
    with_y = small_npz(np.ones((100, 10)), np.zeros(100))
    assert parse_npz(with_y, max_bytes=8_800).y.shape == (100,)
    with pytest.raises(DatasetTooLarge, match="y"):
        parse_npz(with_y, max_bytes=8_799)


def test_a_header_declaring_2e6_by_1e4_is_too_large_not_an_allocation() -> None:
    with pytest.raises(DatasetTooLarge, match=r"X \(shape \[2000000, 10000\], dtype <f8\).*160,000,000,000 bytes"):
        parse_npz(lying_header((2_000_000, 10_000)), max_bytes=256 * MiB)
    with pytest.raises(ValueError, match="truncated"):  # with no cap it is still only a truncated member
        parse_npz(lying_header((20, 10)), max_bytes=None)


def test_a_member_longer_than_its_header_is_malformed() -> None:
    body = lying_header((2, 2), np.ones(4).tobytes() + bytes(1 << 20))
    with pytest.raises(ValueError, match="more data than its .npy header declares") as caught:
        parse_npz(body)
    assert not isinstance(caught.value, DatasetTooLarge)


def test_a_huge_declared_member_size_is_refused_before_reading() -> None:
    body = bytearray(small_npz(np.ones((2, 2))))
    directory = body.rfind(b"PK\x01\x02")
    # uncompressed size in the central directory entry (offset 24); with zip64 the real one is in the extra
    size = struct.unpack_from("<I", body, directory + 24)[0]
    if size == 0xFFFFFFFF:
        extra_at = directory + 46 + struct.unpack_from("<H", body, directory + 28)[0]
        struct.pack_into("<Q", body, extra_at + 4, 10**12)
    else:
        struct.pack_into("<I", body, directory + 24, 0xFFFFFFF0)
    with pytest.raises(DatasetTooLarge, match="declares"):
        parse_npz(bytes(body))


def test_an_overlong_npy_header_is_not_read_in_full() -> None:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as archive:
        # format 2.0 allows a 4 GiB header; this one says 3 GiB and holds 2 MiB of spaces
        archive.writestr("X.npy", b"\x93NUMPY\x02\x00" + struct.pack("<I", 3 << 30) + b" " * (2 * MiB))
    with pytest.raises(ValueError, match="header is longer than"):
        parse_npz(buffer.getvalue(), max_bytes=None)


def test_a_zip_directory_of_thousands_of_entries_is_refused_before_zipfile_parses_it() -> None:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_STORED) as archive:
        for index in range(MAX_ZIP_DIRECTORY_BYTES // 40):
            archive.writestr(f"m{index}.npy", b"")
    with pytest.raises(ValueError, match="zip directory declares"):
        parse_npz(buffer.getvalue())


@pytest.mark.parametrize(
    ("body", "message"),
    [
        (small_npz(np.ones((3, 2)))[:-30], "not a valid zip"),  # truncated zip
        (small_npz(np.ones((300, 20)))[:200], "not a valid zip"),
        (lying_header((3, 2), b"\x00" * 7), "truncated"),
    ],
)
def test_truncations_are_malformed(body: bytes, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        parse_npz(body)


def test_a_nested_zip_and_other_members_are_malformed() -> None:
    inner = small_npz(np.ones((2, 2)))
    nested = io.BytesIO()
    with zipfile.ZipFile(nested, "w") as archive:
        archive.writestr("X.npy", inner)
    with pytest.raises(ValueError, match="could not read the header of X"):
        parse_npz(nested.getvalue())
    other = io.BytesIO()
    with zipfile.ZipFile(other, "w") as archive:
        archive.writestr("X.txt", b"1,2\n")
    with pytest.raises(ValueError, match="unexpected member 'X.txt'"):
        parse_npz(other.getvalue())


def test_negative_and_object_headers_are_refused_without_unpickling() -> None:
    with pytest.raises(ValueError, match="negative dimension|could not read the header"):
        parse_npz(lying_header((-1, 2)))
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        archive.writestr("X.npy", npy_header((1, 1), descr="|O") + b"\x80\x04N.")
    with pytest.raises(ValueError, match="object array"):
        parse_npz(buffer.getvalue())


def test_fortran_order_and_big_endian_arrays_read_back_exactly() -> None:
    X = np.asfortranarray(np.arange(12, dtype=">f8").reshape(3, 4))
    assert parse_npz(small_npz(X)).X.tolist() == X.tolist()


def test_random_corruptions_only_ever_raise_value_errors() -> None:
    valid = small_npz(np.arange(60.0).reshape(20, 3), np.arange(20.0))
    rng = random.Random(15)
    outcomes = {"parsed": 0, "refused": 0}
    for _ in range(400):
        body = bytearray(valid)
        for _ in range(rng.randint(1, 6)):
            body[rng.randrange(len(body))] = rng.randrange(256)
        if rng.random() < 0.3:
            del body[rng.randrange(len(body)):]
        try:
            parse_npz(bytes(body))
            outcomes["parsed"] += 1
        except ValueError:
            outcomes["refused"] += 1
    assert outcomes["refused"] > 100, outcomes


def test_csv_and_json_are_capped_by_their_parsed_size() -> None:
    csv_body = b"1,2,3\n" * 1000  # 1,000 rows × 3 values = 24,000 bytes parsed
    kwargs = {"max_rows": 10_000, "max_cols": 10}
    assert parse_dataset_upload(csv_body, "text/csv", max_bytes=24_000, **kwargs).X.shape == (1000, 2)
    with pytest.raises(DatasetTooLarge, match="the CSV"):
        parse_dataset_upload(csv_body, "text/csv", max_bytes=23_999, **kwargs)
    json_body = json.dumps({"X": [[1.0, 2.0]] * 1000, "y": [0] * 1000}).encode()
    assert parse_dataset_upload(json_body, "application/json", max_bytes=24_000, **kwargs).y.dtype == np.int64
    with pytest.raises(DatasetTooLarge, match="24,000 bytes"):
        parse_dataset_upload(json_body, "application/json", max_bytes=23_999, **kwargs)
