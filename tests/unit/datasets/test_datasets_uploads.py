"""Upload parsing (JSON, .npz, CSV): accepted shapes and dtypes, and one test per rejection; storage round trip."""

from __future__ import annotations

import io
import json
import zipfile

import numpy as np
import pytest

from inference_core.datasets import (
    Dataset,
    UnsupportedMediaType,
    dataset_digest,
    dataset_from_npz,
    dataset_to_npz,
    parse_dataset_upload,
)

CAPS = {"max_rows": 100, "max_cols": 10}


def parse(data: bytes, media_type: str, **kwargs) -> Dataset:
    return parse_dataset_upload(data, media_type, **{**CAPS, **kwargs})


def npz(**arrays: np.ndarray) -> bytes:
    buffer = io.BytesIO()
    np.savez_compressed(buffer, **arrays)
    return buffer.getvalue()


# ---------------------------------------------------------------------------------------------- JSON


def test_json_with_integer_labels_and_float_targets() -> None:
    labelled = parse(b'{"X": [[1, 2.5], [3, 4]], "y": [0, 1]}', "application/json")
    assert labelled.X.dtype == np.float64 and labelled.X.tolist() == [[1.0, 2.5], [3.0, 4.0]]
    assert labelled.y.dtype == np.int64 and labelled.y.tolist() == [0, 1]
    real = parse(b'{"X": [[1], [2]], "y": [0.5, 1]}', "application/json; charset=utf-8")
    assert real.y.dtype == np.float64 and real.y.tolist() == [0.5, 1.0]
    unlabelled = parse(b'{"X": [[1e-3], [2E2]]}', "application/json")
    assert unlabelled.y is None and unlabelled.X[:, 0].tolist() == [1e-3, 200.0]
    with_test = parse(b'{"X": [[1], [2]], "y": [1, 2], "X_test": [[3]], "y_test": [3]}', "application/json")
    assert with_test.X_test.tolist() == [[3.0]] and with_test.y_test.tolist() == [3]


@pytest.mark.parametrize(
    ("body", "message"),
    [
        (b'{"X": [[1, NaN]]}', "NaN"),
        (b'{"X": [[1, Infinity]]}', "Infinity"),
        (b'{"X": [[1, -Infinity]]}', "Infinity"),
        (b'{"X": [[1e999]]}', "NaN or infinity"),
        (b'{"X": [[1, 2], [3]]}', "ragged rows: row 1 has 1 values, row 0 has 2"),
        (b'{"X": [[1, "2"]]}', r"X\[0\]\[1\] must be a number, got a string"),
        (b'{"X": [[1, true]]}', r"X\[0\]\[1\] must be a number, got a boolean"),
        (b'{"X": [[1, null]]}', "got null"),
        (b'{"X": [[1, [2]]]}', "got an array"),
        (b'{"X": [[1], [2]], "y": [1, "a"]}', r"y\[1\] must be a number, got a string"),
        (b'{"X": [[1], [2]], "y": [true, false]}', "got a boolean"),
        (b'{"X": [[1], [2]], "y": [1]}', "y has 1 entries but there are 2 rows"),
        (b'{"X": [[1], [2]], "y": [[1], [2]]}', r"y\[0\] must be a number, got an array"),
        (b'{"X": []}', "X is empty"),
        (b'{"X": [[]]}', "rows need at least one number"),
        (b'{"X": [1, 2]}', r"X\[0\] must be an array of numbers"),
        (b'{"X": "a"}', "X must be an array of rows"),
        (b'{"y": [1]}', "no 'X'"),
        (b'{"X": [[1]], "z": 1}', "unknown key"),
        (b'[[1, 2]]', "must be an object"),
        (b'{"X": [[1]', "not valid JSON"),
        (b'\xff\xfe', "not valid UTF-8"),
        (b'{"X": [[' + b"1, " * 10 + b"1]]}", "too many columns: X has 11, the cap is 10"),
        (json.dumps({"X": [[1.0]] * 101}).encode(), "too many rows: X has 101"),
        (json.dumps({"X": [[1.0]] * 60, "X_test": [[1.0]] * 41}).encode(), "too many rows: X_test has 41"),
        (b'{"X": [[1]], "y": [' + b"9" * 30 + b"]}", "int64 range"),
        (b'{"X": [[1]], "y_test": [1]}', "y_test is given without X_test"),
        (b'{"X": [[1]], "y": [1], "X_test": [[1]]}', "give y_test exactly when y is given"),
        (b'{"X": [[1, 2]], "X_test": [[1]]}', "X_test has 1 columns but X has 2"),
        (b"[" * 100_000 + b"]" * 100_000, "nested too deeply"),
        (b"", "empty"),
    ],
)
def test_json_rejections_say_what_is_wrong(body: bytes, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        parse(body, "application/json")


# ----------------------------------------------------------------------------------------------- NPZ


def test_npz_accepts_real_dtypes_and_keeps_integer_labels() -> None:
    X = np.arange(12, dtype=np.int32).reshape(6, 2)
    ds = parse(npz(X=X, y=np.array([0, 1, 1, 0, 2, 1], dtype=np.uint8), X_test=np.ones((2, 2), np.float32),
                   y_test=np.array([1, 0])), "application/x-npz")
    assert ds.X.dtype == np.float64 and np.array_equal(ds.X, X)
    assert ds.y.dtype == np.int64 and ds.y.tolist() == [0, 1, 1, 0, 2, 1]
    assert ds.X_test.dtype == np.float64 and ds.y_test.tolist() == [1, 0]
    big_endian = parse(npz(X=np.array([[1.5, -2.0]], dtype=">f8")), "application/octet-stream")
    assert big_endian.X.tolist() == [[1.5, -2.0]]


def npz_with_header(key: str, header_shape: tuple[int, ...], payload: bytes = b"") -> bytes:
    """A hand-made .npz whose member claims `header_shape` (to test checks made before reading data)."""
    member = io.BytesIO()
    np.lib.format.write_array_header_1_0(member, {"descr": "<f8", "fortran_order": False, "shape": header_shape})
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as archive:
        archive.writestr(f"{key}.npy", member.getvalue() + payload)
    return buffer.getvalue()


@pytest.mark.parametrize(
    ("body", "message"),
    [
        (npz(X=np.array([[1.0, np.nan]])), r"NaN or infinity \(first at row 0, column 1\)"),
        (npz(X=np.array([[1.0], [np.inf]])), "NaN or infinity"),
        (npz(X=np.array([[1, 2]], dtype=object)), "object array"),
        (npz(X=np.array([["a", "b"]])), "must hold real numbers"),
        (npz(X=np.array([[True, False]])), "booleans"),
        (npz(X=np.array([[1 + 2j]])), "complex"),
        (npz(X=np.zeros((1,), dtype=[("a", "<f8")])), "structured"),
        (npz(X=np.ones(3)), "2-D array"),
        (npz(X=np.ones((2, 2, 2))), "2-D array"),
        (npz(X=np.ones((0, 2))), "X is empty"),
        (npz(X=np.ones((2, 2)), y=np.ones(3)), "y has 3 entries but there are 2 rows"),
        (npz(X=np.ones((2, 2)), y=np.ones((2, 1))), "1-D array"),
        (npz(X=np.ones((2, 2)), y=np.array([1.0, np.nan])), r"y contains NaN or infinity \(first at index 1\)"),
        (npz(X=np.ones((2, 11))), "too many columns: X has 11, the cap is 10"),
        (npz(X=np.ones((101, 2))), "too many rows: X has 101"),
        (npz(X=np.ones((2, 2)), w=np.ones(2)), "unknown array"),
        (npz(y=np.ones(2)), "no 'X'"),
        (npz_with_header("X", (10**9, 10**9)), "too many rows"),  # rejected from the header alone
        (npz_with_header("X", (10, 2), b"\x00" * 8), "could not read X"),  # truncated data
        (b"PK\x03\x04 not really a zip", "not a valid zip"),
        (b"just bytes", "not an .npz"),
    ],
)
def test_npz_rejections_say_what_is_wrong(body: bytes, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        parse(body, "application/x-npz")


def test_npz_never_unpickles() -> None:
    class Boom:
        def __reduce__(self):
            return (print, ("unpickled!",))

    body = npz(X=np.array([[Boom()]], dtype=object))
    with pytest.raises(ValueError, match="object array"):
        parse(body, "application/x-npz")


# ----------------------------------------------------------------------------------------------- CSV


def test_csv_header_detection_and_target_column() -> None:
    with_header = parse(b"a,b,target\n1,2,0\n3,4.5,1\n", "text/csv")
    assert with_header.X.tolist() == [[1.0, 2.0], [3.0, 4.5]] and with_header.y.tolist() == [0, 1]
    assert with_header.y.dtype == np.int64
    no_header = parse(b"1,2,0.5\r\n3,4,1.5\r\n\r\n", "text/csv")
    assert no_header.X.tolist() == [[1.0, 2.0], [3.0, 4.0]] and no_header.y.tolist() == [0.5, 1.5]
    by_name = parse(b"\xef\xbb\xbfy,x1,x2\n7,1,2\n8,3,4\n", "text/csv", target_column="y")  # with a BOM
    assert by_name.y.tolist() == [7, 8] and by_name.X.tolist() == [[1.0, 2.0], [3.0, 4.0]]
    by_index = parse(b"1,2,3\n4,5,6\n", "text/csv", target_column=0)
    assert by_index.y.tolist() == [1, 4] and by_index.X.tolist() == [[2.0, 3.0], [5.0, 6.0]]
    no_y = parse(b"1,2\n3,4\n", "text/csv", target_column=None)
    assert no_y.y is None and no_y.X.shape == (2, 2)
    forced = parse(b"1,2\n3,4\n", "text/csv", header=True)
    assert forced.X.tolist() == [[3.0]] and forced.y.tolist() == [4]
    spaced = parse(b" 1 , -2e-1 ,+3\n .5,6.,7\n", "text/csv")
    assert spaced.X.tolist() == [[1.0, -0.2], [0.5, 6.0]] and spaced.y.tolist() == [3, 7]


@pytest.mark.parametrize(
    ("body", "kwargs", "message"),
    [
        (b"1,2\n3,nan\n", {}, "'nan' is not a number"),
        (b"1,2\n3,inf\n", {}, "'inf' is not a number"),
        (b"1,2\n3,1e999\n", {}, "not a finite float64 number"),
        (b"1,2\n3,\n", {}, "empty"),
        (b"1,2\n3,x\n", {}, "data row 1, column 1: 'x' is not a number"),
        (b"a,b\n1,2\n3,x\n", {}, r"column 1 \('b'\)"),
        (b"1,2,3\n4,5\n", {}, "ragged rows: line 2 has 2 fields, the first line has 3"),
        (b"1,2\n3,true\n", {}, "not a number"),
        (b"1,2\n3,1_000\n", {}, "not a number"),
        (b"a,b\n", {}, "no data rows"),
        (b"\n\n", {}, "no data rows"),
        (b"1\n2\n", {}, "no feature columns"),
        (b"1,2\n", {"target_column": "y"}, "no header row"),
        (b"a,b\n1,2\n", {"target_column": "y"}, "is not a column"),
        (b"a,a,b\n1,2,3\n", {"target_column": "a"}, "more than one column"),
        (b"1,2\n", {"target_column": 2}, "out of range"),
        (b"1,2\n", {"target_column": 1.5}, "column index"),
        (b",".join([b"1"] * 12) + b"\n", {}, "too many columns: 11 feature columns"),
        (b"1,2\n" * 101, {}, "too many rows: more than the cap of 100"),
        (b'1,2\n"3,4\n', {}, "malformed at line"),
        (b'1,2\n"3"x,4\n', {}, "malformed at line 2"),
        (b"\xff,1\n", {}, "not valid UTF-8"),
    ],
)
def test_csv_rejections_say_what_is_wrong(body: bytes, kwargs: dict, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        parse(body, "text/csv", **kwargs)


def test_unknown_media_type_is_its_own_error() -> None:
    with pytest.raises(UnsupportedMediaType, match="unsupported media type 'image/png'"):
        parse(b"abc", "image/png")


# -------------------------------------------------------------------------------------------- storage


def test_npz_storage_round_trip_is_bit_exact_and_deterministic() -> None:
    rng = np.random.default_rng(3)
    original = Dataset(X=rng.normal(size=(30, 4)) * 1e300, y=rng.integers(0, 5, size=30),
                       X_test=rng.normal(size=(5, 4)), y_test=rng.integers(0, 5, size=5), name="héllo ds")
    stored = dataset_to_npz(original)
    back = dataset_from_npz(stored)
    assert back.same_arrays(original) and back.name == "héllo ds"
    for key, array in original.arrays().items():
        assert getattr(back, key).tobytes() == array.tobytes() and getattr(back, key).dtype == array.dtype
    assert dataset_to_npz(back) == stored  # same bytes every time (fixed member order and timestamps)
    # The storage form is an ordinary .npz readable without pickles.
    with np.load(io.BytesIO(stored), allow_pickle=False) as archive:
        assert sorted(archive.files) == ["X", "X_test", "name", "y", "y_test"]
    unlabelled = Dataset(X=np.ones((2, 1)))
    assert dataset_from_npz(dataset_to_npz(unlabelled)).same_arrays(unlabelled)


def test_digest_depends_on_content_only() -> None:
    a = Dataset(X=np.array([[1.0, 2.0]]), y=np.array([1]), name="a")
    same = Dataset(X=np.array([[1.0, 2.0]]), y=np.array([1]), name="b")
    assert dataset_digest(a) == dataset_digest(same) and len(dataset_digest(a)) == 64
    assert dataset_digest(a) != dataset_digest(Dataset(X=np.array([[1.0, 2.0]]), y=np.array([1.0])))  # dtype
    assert dataset_digest(a) != dataset_digest(Dataset(X=np.array([[1.0], [2.0]]), y=np.array([1, 1])))  # shape
    assert dataset_digest(a) != dataset_digest(Dataset(X=np.array([[1.0, 2.0]])))  # y absent
    assert dataset_digest(a) != dataset_digest(Dataset(X=np.array([[1.0, 2.0 + 1e-15]]), y=np.array([1])))


def test_parsed_formats_agree() -> None:
    from_json = parse(b'{"X": [[1.5, 2], [3, 4]], "y": [1, 0]}', "application/json")
    from_csv = parse(b"x1,x2,y\n1.5,2,1\n3,4,0\n", "text/csv")
    from_npz = parse(npz(X=np.array([[1.5, 2.0], [3.0, 4.0]]), y=np.array([1, 0])), "application/zip")
    assert from_json.same_arrays(from_csv) and from_json.same_arrays(from_npz)
    assert dataset_digest(from_json) == dataset_digest(from_npz)


def test_json_number_bound_counts_every_number_from_the_bytes() -> None:
    """The pre-decode bound against json.loads' own count (numbers of the decoded document), including numbers
    that straddle the scan's chunk boundaries."""
    from inference_core.datasets.uploads import _READ_CHUNK, _json_number_bound

    rng = np.random.default_rng(0)
    X = rng.standard_normal((_READ_CHUNK // 20, 3)) * 10.0 ** rng.integers(-5, 5, size=(_READ_CHUNK // 20, 3))
    y = rng.integers(-3, 3, size=X.shape[0])
    for body in (json.dumps({"X": X.tolist(), "y": y.tolist()}).encode(),
                 json.dumps({"X_test": [[-1e-3, 2E+5, 0.5]], "X": [[1, 2, 3]]}, indent=2).encode()):
        document = json.loads(body)
        numbers = sum(np.asarray(value).size for value in document.values())
        assert numbers <= _json_number_bound(body) <= numbers + len(document)  # keys such as "X_test" hold an e


def test_json_over_the_memory_cap_is_refused_before_decoding() -> None:
    from inference_core.datasets.uploads import DatasetTooLarge

    body = b'{"X": [' + b",".join([b"[0.5]"] * 1000) + b"]}"
    with pytest.raises(DatasetTooLarge, match="8,000 bytes"):
        parse(body, "application/json", max_bytes=7999, max_rows=1000)
    assert parse(body, "application/json", max_bytes=8000, max_rows=1000).X.shape == (1000, 1)
