"""The `dataset` field: resolving built-in refs, uploaded ids and inline data; the ids a spec references."""

from __future__ import annotations

import numpy as np
import pytest

from inference_core import errors
from inference_core.datasets import Dataset, dataset_ref_ids, load_builtin, resolve_dataset
from inference_core.schemas.models import BNNSpec, InlineDataset
from inference_core.targets.base import BuildContext

DS_ID = "ds_" + "0123456789abcdef" * 2


def test_builtin_reference_resolves_to_the_bundled_set() -> None:
    resolved = resolve_dataset("uci:concrete:split=3", BuildContext())
    assert resolved.same_arrays(load_builtin("uci:concrete:split=3"))
    assert resolved.shape == (927, 8) and resolved.n_test_rows == 103


def test_uploaded_id_goes_through_the_context_loader() -> None:
    stored = Dataset(X=np.arange(6.0).reshape(3, 2), y=np.array([0.5, 1.5, 2.5]), name=DS_ID)
    calls: list[str] = []

    def load_dataset(dataset_id: str) -> Dataset:
        calls.append(dataset_id)
        return stored

    assert resolve_dataset(DS_ID, BuildContext(load_dataset=load_dataset)) is stored
    assert calls == [DS_ID]


def test_a_loader_returning_a_mapping_is_accepted_and_validated() -> None:
    context = BuildContext(load_dataset=lambda _: {"X": np.ones((2, 1)), "y": np.array([1.0, 2.0])})
    resolved = resolve_dataset(DS_ID, context)
    assert resolved.X.tolist() == [[1.0], [1.0]] and resolved.name == DS_ID
    broken = BuildContext(load_dataset=lambda _: {"X": np.array([[np.nan]])})
    with pytest.raises(errors.TargetInvalid, match="NaN"):
        resolve_dataset(DS_ID, broken)
    with pytest.raises(errors.TargetInvalid, match="returned no data"):
        resolve_dataset(DS_ID, BuildContext(load_dataset=lambda _: None))


def test_loader_errors_propagate_unchanged() -> None:
    def missing(dataset_id: str) -> Dataset:
        raise KeyError(dataset_id)

    with pytest.raises(KeyError):
        resolve_dataset(DS_ID, BuildContext(load_dataset=missing))


def test_an_uploaded_id_without_a_loader_is_a_target_error() -> None:
    with pytest.raises(errors.TargetInvalid, match="no dataset loader"):
        resolve_dataset(DS_ID, BuildContext())


def test_inline_data_resolves_from_the_model_or_a_dict() -> None:
    inline = InlineDataset(X=[[1, 2], [3, 4]], y=[1, 0])
    resolved = resolve_dataset(inline, BuildContext())
    assert resolved.X.tolist() == [[1.0, 2.0], [3.0, 4.0]] and resolved.y.tolist() == [1.0, 0.0]
    assert resolved.name == "inline"
    assert resolve_dataset({"X": [[1.0]], "y": None}, BuildContext()).y is None
    with pytest.raises(errors.TargetInvalid, match="inline dataset"):
        resolve_dataset({"X": [[1.0], [2.0]], "y": [1.0]}, BuildContext())


def test_unknown_strings_are_target_errors() -> None:
    with pytest.raises(errors.TargetInvalid, match="neither"):
        resolve_dataset("s3://bucket/data.csv", BuildContext())
    with pytest.raises(errors.TargetInvalid, match="has 5 splits"):
        resolve_dataset("uci:protein:split=5", BuildContext())


def test_dataset_ref_ids_finds_uploaded_ids_only() -> None:
    other = "ds_" + "f" * 32
    spec = BNNSpec(dataset=DS_ID).model_dump(mode="json")
    assert dataset_ref_ids(spec) == [DS_ID]
    assert dataset_ref_ids({"kind": "bnn", "dataset": "uci:concrete:split=0"}) == []
    assert dataset_ref_ids({"kind": "bnn", "dataset": {"X": [[1.0]], "y": [1.0]}}) == []
    nested = {"kind": "future", "parts": [{"dataset": other}, {"dataset": DS_ID}, {"dataset": other}],
              "name": DS_ID}  # a ds_ string that is not a dataset field is not a reference
    assert dataset_ref_ids(nested) == sorted([DS_ID, other])
    assert dataset_ref_ids({"dataset": "ds_" + "A" * 32}) == []  # ids are lowercase hex


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"X": np.ones(3)}, "2-D array"),
        ({"X": np.ones((2, 2)), "y": np.ones(3)}, "y has 3 entries but there are 2 rows"),
        ({"X": np.array([[1.0, np.inf]])}, r"first at row 0, column 1"),
        ({"X": np.ones((2, 2), dtype=bool)}, "booleans"),
        ({"X": np.array([["1"]])}, "real numbers"),
        ({"X": np.ones((2, 1)), "y": np.array([1 + 1j, 2])}, "complex"),
        ({"X": np.array([[2**60]])}, "beyond 2\\^53"),
        ({"X": np.ones((1, 1)), "y": np.array([2**63], dtype=np.uint64)}, "int64 range"),
    ],
)
def test_dataset_validation_messages(kwargs: dict, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        Dataset(**kwargs)


def test_dataset_copies_and_freezes_its_arrays() -> None:
    X = np.ones((2, 2))
    ds = Dataset(X=X, y=np.array([1, 2], dtype=np.int32))
    X[0, 0] = 5.0  # the caller's array stays writable and the Dataset does not see the change
    assert ds.X[0, 0] == 1.0 and not ds.X.flags.writeable and ds.y.dtype == np.int64
    assert ds.labels_are_integers and ds.shape == (2, 2) and not ds.has_test
