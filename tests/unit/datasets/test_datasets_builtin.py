"""Built-in data sets: bundled .npz files equal their sources bit for bit; references parse as documented."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import inference_core.datasets as datasets_package
from inference_core.datasets import BUILTIN_DATASETS, load_builtin, parse_builtin_ref
from inference_core.datasets.builtin import decode_columns, encode_columns

UCI_SOURCE = Path("/work/shared/data/uci")
DATA_DIR = Path(datasets_package.__file__).parent / "data"
UCI_NAMES = sorted(BUILTIN_DATASETS["uci"])
SKLEARN_NAMES = sorted(BUILTIN_DATASETS["sklearn"])


@pytest.mark.skipif(not UCI_SOURCE.is_dir(), reason="UCI source folder not available")
@pytest.mark.parametrize("name", UCI_NAMES)
def test_every_bundled_uci_split_equals_the_text_files(name: str) -> None:
    folder = UCI_SOURCE / name
    data = np.loadtxt(folder / "data.txt", dtype=np.float64, ndmin=2)
    features = np.loadtxt(folder / "index_features.txt", dtype=np.int64, ndmin=1)
    target = int(np.loadtxt(folder / "index_target.txt", dtype=np.int64))
    n_splits = int((folder / "n_splits.txt").read_text())
    info = BUILTIN_DATASETS["uci"][name]
    assert info.n_splits == n_splits and info.n_rows == data.shape[0] and info.n_features == len(features)

    whole = load_builtin(f"uci:{name}")
    assert np.array_equal(whole.X, data[:, features]) and np.array_equal(whole.y, data[:, target])
    assert whole.X_test is None and whole.y.dtype == np.float64
    for split in range(n_splits):
        train = np.loadtxt(folder / f"index_train_{split}.txt", dtype=np.int64, ndmin=1)
        test = np.loadtxt(folder / f"index_test_{split}.txt", dtype=np.int64, ndmin=1)
        ds = load_builtin(f"uci:{name}:split={split}")
        # array_equal on float64 is bit equality here (no NaNs in the data).
        assert np.array_equal(ds.X, data[train][:, features])
        assert np.array_equal(ds.y, data[train, target])
        assert np.array_equal(ds.X_test, data[test][:, features])
        assert np.array_equal(ds.y_test, data[test, target])
        assert ds.X.dtype == np.float64 and ds.name == f"uci:{name}:split={split}"
    with pytest.raises(ValueError, match=f"has {n_splits} splits"):
        parse_builtin_ref(f"uci:{name}:split={n_splits}")


@pytest.mark.parametrize("name", SKLEARN_NAMES)
def test_sklearn_sets_equal_the_sklearn_loaders(name: str) -> None:
    sklearn_datasets = pytest.importorskip("sklearn.datasets")
    bunch = getattr(sklearn_datasets, f"load_{name}")()
    ds = load_builtin(f"sklearn:{name}")
    assert np.array_equal(ds.X, bunch.data) and ds.X.dtype == np.float64
    assert np.array_equal(ds.y, bunch.target)
    info = BUILTIN_DATASETS["sklearn"][name]
    if info.n_classes is None:
        assert ds.y.dtype == np.float64
    else:
        assert ds.y.dtype == np.int64 and int(ds.y.max()) + 1 == info.n_classes
    assert ds.X_test is None and ds.shape == (info.n_rows, info.n_features)


@pytest.mark.parametrize("source", ["uci", "sklearn"])
def test_metadata_matches_the_bundled_files(source: str) -> None:
    for name, info in BUILTIN_DATASETS[source].items():
        ds = load_builtin(f"{source}:{name}")
        assert ds.shape == (info.n_rows, info.n_features), name
        if info.n_splits:
            split = load_builtin(f"{source}:{name}:split={info.n_splits - 1}")
            assert split.n_rows == info.n_train and split.n_test_rows == info.n_test
            assert split.n_rows + split.n_test_rows == info.n_rows


def test_bundle_is_small_and_contains_exactly_the_registered_files() -> None:
    files = sorted(path.name for path in DATA_DIR.glob("*.npz"))
    expected = sorted(info.file for group in BUILTIN_DATASETS.values() for info in group.values())
    assert files == expected
    assert sum((DATA_DIR / name).stat().st_size for name in files) < 5 * 2**20


def test_aliases_resolve_to_the_folder_names() -> None:
    assert load_builtin("uci:boston:split=2").same_arrays(load_builtin("uci:bostonHousing:split=2"))
    assert parse_builtin_ref("uci:protein").info.name == "protein-tertiary-structure"
    assert parse_builtin_ref("uci:wine").info.name == "wine-quality-red"
    assert parse_builtin_ref("sklearn:wine").info.name == "wine"  # namespaces keep the two wines apart
    assert parse_builtin_ref("uci:naval:split=19").canonical == "uci:naval-propulsion-plant:split=19"


@pytest.mark.parametrize(
    ("ref", "message"),
    [
        ("uci:protein:split=5", "has 5 splits"),
        ("uci:concrete:split=-1", "split=K"),
        ("uci:concrete:split=1.0", "split=K"),
        ("uci:concrete:split=01", "split=K"),
        ("uci:concrete:fold=1", "split=K"),
        ("uci:concrete:split=1:x", "one option"),
        ("uci:nope", "unknown uci data set"),
        ("sklearn:iris:split=0", "no options"),
        ("sklearn:mnist", "unknown sklearn data set"),
        ("uci", "unknown data set reference"),
        ("kaggle:titanic", "unknown data set reference"),
    ],
)
def test_bad_references_say_what_is_wrong(ref: str, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        parse_builtin_ref(ref)


def test_loaded_arrays_are_read_only_and_cached() -> None:
    ds = load_builtin("uci:yacht:split=0")
    assert load_builtin("uci:yacht:split=0") is ds
    with pytest.raises(ValueError):
        ds.X[0, 0] = 1.0


def test_splits_partition_the_rows() -> None:
    whole = load_builtin("uci:energy")
    ds = load_builtin("uci:energy:split=7")
    stacked = np.vstack([ds.X, ds.X_test])
    # Every row of the whole set appears once across train and test (rows are distinct in this set).
    assert sorted(map(tuple, stacked)) == sorted(map(tuple, whole.X))


def test_decimal_encoding_is_bit_exact_and_falls_back_to_float64() -> None:
    rng = np.random.default_rng(0)
    short = np.round(rng.normal(size=(50, 3)) * 1000) / np.array([1.0, 100.0, 1e6])
    encoded = encode_columns(short)
    assert "data_int" in encoded and encoded["data_decimals"].tolist() == [0, 2, 6]
    assert decode_columns(encoded).tobytes() == short.tobytes()
    long = rng.normal(size=(20, 2))  # full-precision floats have no short decimal form
    fallback = encode_columns(long)
    assert set(fallback) == {"data"} and decode_columns(fallback).tobytes() == long.tobytes()


def test_datasets_and_model_schemas_do_not_import_torch() -> None:
    code = ("import sys, inference_core.datasets, inference_core.schemas.models, inference_core.catalog\n"
            "from inference_core.datasets import load_builtin\nload_builtin('uci:yacht:split=0')\n"
            "print('torch' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"
