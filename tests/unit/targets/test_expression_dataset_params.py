"""Expression params taken from a data set's columns (issue 41, item 6): the param form and its errors, the
shapes checked against a data set's shape (at validation for a built-in set, at submit for an uploaded one),
the values the builder selects (float64 → the job's dtype), and a conjugate regression's log-density over
data-set columns against its closed form."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from inference_core import errors
from inference_core.datasets import Dataset, dataset_ref_ids, load_builtin
from inference_core.datasets.columns import DatasetShape, columns_shape, select_columns
from inference_core.expression import MAX_PARAM_ELEMENTS
from inference_core.schemas.targets import MAX_DATASET_PARAM_ELEMENTS, DatasetColumns, ExpressionTargetSpec
from inference_core.spec import validate_job_spec
from inference_core.targets import BuildContext, build_target

DS = "ds_" + "0123456789abcdef" * 2
OTHER = "ds_" + "f" * 32
RNG = np.random.default_rng(7)
X = RNG.normal(size=(40, 3))
Y = X @ np.array([0.5, -1.0, 2.0]) + 0.3 * RNG.normal(size=40)
DATA = Dataset(X=X, y=Y, name="regression")
REGRESSION = "sum(log_normal(y, A @ x, 0.3)) + sum(log_normal(x, 0, 10))"


def spec(log_prob: str, params: dict, dim: int = 2) -> dict:
    return {"method": "svgd", "target": {"kind": "expression", "dim": dim, "log_prob": log_prob, "params": params}}


def invalid(raw: dict) -> errors.TargetInvalid:
    with pytest.raises(errors.TargetInvalid) as caught:
        validate_job_spec(raw)
    return caught.value


def loader(datasets: dict[str, Dataset]):
    def load(dataset_id: str) -> Dataset:
        if dataset_id not in datasets:
            raise errors.TargetInvalid(f"no dataset {dataset_id!r}", loc=("target", "dataset"))
        return datasets[dataset_id]

    return load


# --- the param form ------------------------------------------------------------------------------------


def test_the_forms_validate_and_round_trip_through_the_normalised_spec() -> None:
    params = {"y": {"dataset": DS, "column": "y"}, "A": {"dataset": DS, "columns": [0, 2]},
              "Z": {"dataset": DS, "columns": "X"}, "c": {"dataset": DS, "column": 1}, "s": 0.3}
    normalised = validate_job_spec(spec("sum(x)", params)).target
    assert normalised["params"]["y"] == {"dataset": DS, "column": "y", "columns": None}
    assert normalised["params"]["A"] == {"dataset": DS, "column": None, "columns": [0, 2]}
    assert validate_job_spec(spec("sum(x)", normalised["params"])).target == normalised
    # the ids are found wherever they sit: the API checks they are the caller's and links them to the job
    assert dataset_ref_ids(normalised) == [DS]
    model = ExpressionTargetSpec.model_validate(normalised)
    assert model.uploaded_datasets() == [DS]
    assert isinstance(model.params["y"], DatasetColumns) and model.params["s"] == 0.3


@pytest.mark.parametrize(
    ("value", "fragment"),
    [
        ({"dataset": DS}, "give exactly one of 'column' (a vector) or 'columns' (a matrix)"),
        ({"dataset": DS, "column": "y", "columns": [0]}, "give exactly one of"),
        ({"dataset": DS, "column": -1}, "must not be negative"),
        ({"dataset": DS, "columns": [0, -2]}, "must not be negative"),
        ({"dataset": DS, "columns": []}, "'columns' is empty"),
        ({"dataset": DS, "column": "x1"}, "column"),
        ({"dataset": DS, "column": True}, "column"),
        ({"dataset": DS, "column": 1.0}, "column"),
        ({"dataset": DS, "columns": "Y"}, "columns"),
        ({"dataset": DS, "column": 0, "rows": [1]}, "Extra inputs are not permitted"),
        ({"dataset": "ds_123", "column": 0}, "neither an uploaded data set id"),
        ({"dataset": "/etc/passwd", "column": 0}, "neither an uploaded data set id"),
        ({"dataset": "uci:nope", "column": 0}, "nope"),
        ({"dataset": 5, "column": 0}, "dataset"),
        ({"dataset": "uci:" + "a" * 100_000, "column": 0}, "at most 100 characters"),
        ({"dataset": "uci:yacht:split=0", "column": 6}, "column 6 is not a column of the data set"),
        ({"dataset": "uci:yacht:split=0", "columns": [0, 99]}, "column 99 is not a column"),
        ({}, "dataset"),
    ],
)
def test_bad_forms_are_a_target_invalid_at_params(value: dict, fragment: str) -> None:
    error = invalid(spec("sum(x)", {"p": value}))
    assert error.code == "target_invalid" and error.loc == ("target", "params")
    assert fragment in error.detail and "'p'" in error.detail and len(error.detail) < 400


def test_built_in_sets_are_checked_at_validation() -> None:
    ref = "uci:yacht:split=0"
    n_rows = load_builtin(ref).n_rows
    params = {"y": {"dataset": ref, "column": "y"}, "A": {"dataset": ref, "columns": [0, 5]}}
    validate_job_spec(spec(REGRESSION, params))
    error = invalid(spec(REGRESSION, params, dim=3))
    assert error.loc == ("target", "log_prob")
    assert f"@ cannot combine a {n_rows}x2 matrix with a vector of length 3" in error.detail


def test_with_an_uploaded_set_the_expression_is_checked_against_its_shape() -> None:
    params = {"y": {"dataset": DS, "column": "y"}, "A": {"dataset": DS, "columns": [0, 1]}}
    # validation alone cannot know the shapes: it defers (the API calls check_dataset_shapes at submit)
    model = ExpressionTargetSpec.model_validate(validate_job_spec(spec(REGRESSION, params, dim=3)).target)
    with pytest.raises(errors.TargetInvalid) as caught:
        model.check_dataset_shapes({DS: DatasetShape(40, 3, True)})
    assert caught.value.loc == ("target", "log_prob")
    assert "@ cannot combine a 40x2 matrix with a vector of length 3" in caught.value.detail
    ok = ExpressionTargetSpec.model_validate(validate_job_spec(spec(REGRESSION, params)).target)
    ok.check_dataset_shapes({DS: DatasetShape(40, 3, True)})
    assert ok.param_shapes({DS: DatasetShape(40, 3, True)}) == {"y": (40,), "A": (40, 2)}
    # a column the data set does not have, and y of a set without one: the param is named
    for shape, fragment in [(DatasetShape(40, 1, True), "column 1 is not a column of the data set: use 'y' or "
                             "a feature index 0..0"), (DatasetShape(40, 3, False), "the data set has no y")]:
        with pytest.raises(errors.TargetInvalid) as caught:
            ok.check_dataset_shapes({DS: shape})
        assert caught.value.code == "target_invalid" and fragment in caught.value.detail
        assert caught.value.loc in (("target", "params", "y"), ("target", "params", "A"))
    # rows must agree between columns of different data sets, like any shapes
    mixed = {"y": {"dataset": OTHER, "column": "y"}, "A": {"dataset": DS, "columns": [0, 1]}}
    model = ExpressionTargetSpec.model_validate(validate_job_spec(spec(REGRESSION, mixed)).target)
    assert model.uploaded_datasets() == sorted([DS, OTHER])
    with pytest.raises(errors.TargetInvalid, match="shape mismatch in"):
        model.check_dataset_shapes({DS: DatasetShape(40, 3, True), OTHER: DatasetShape(41, 3, True)})


def test_the_inline_cap_does_not_apply_to_data_set_params_but_their_own_does() -> None:
    rows = MAX_PARAM_ELEMENTS + 1  # more numbers than inline params may hold
    params = {"y": {"dataset": DS, "column": "y"}, "c": {"dataset": DS, "column": 0}}
    model = ExpressionTargetSpec.model_validate(
        validate_job_spec(spec("sum(log_normal(y, c * x[0], exp(x[1])))", params)).target)
    model.check_dataset_shapes({DS: DatasetShape(rows, 3, True)})
    # all of X from a wide set: more than the data-set params' own cap
    wide = {"A": {"dataset": DS, "columns": "X"}}
    model = ExpressionTargetSpec.model_validate(validate_job_spec(spec("sum(A @ x)", wide, dim=8)).target)
    cap_rows = MAX_DATASET_PARAM_ELEMENTS // 8  # 4,194,304 rows of 8 features: exactly at the cap
    model.check_dataset_shapes({DS: DatasetShape(cap_rows, 8, True)})
    with pytest.raises(errors.TargetInvalid, match=f"more than {MAX_DATASET_PARAM_ELEMENTS:,} numbers together"):
        model.check_dataset_shapes({DS: DatasetShape(cap_rows + 1, 8, True)})
    # a computed value over the data is capped like any other (rows x columns in one value)
    model = ExpressionTargetSpec.model_validate(validate_job_spec(spec("sum((A * x[0]) @ x)", wide, 8)).target)
    with pytest.raises(errors.TargetInvalid, match="over the cap of 4,194,304 numbers for one intermediate value"):
        model.check_dataset_shapes({DS: DatasetShape(cap_rows, 8, True)})


def test_columns_helpers() -> None:
    shape = DatasetShape.of(DATA)
    assert shape == DatasetShape(40, 3, True)
    assert columns_shape("y", None, shape) == (40,)
    assert columns_shape(None, [2, "y", 2], shape) == (40, 3)
    assert columns_shape(None, "X", shape) == (40, 3)
    picked = select_columns(DATA, None, [2, "y", 0])
    assert picked.dtype == np.float64 and picked.flags.writeable
    np.testing.assert_array_equal(picked, np.column_stack([X[:, 2], Y, X[:, 0]]))
    labels = Dataset(X=X[:5], y=np.array([0, 1, 1, 0, 2]))
    assert select_columns(labels, "y", None).dtype == np.float64
    with pytest.raises(ValueError, match="column 3 is not a column"):
        select_columns(DATA, 3, None)


# --- the builder ---------------------------------------------------------------------------------------


def test_the_builder_selects_the_columns_in_the_jobs_dtype() -> None:
    params = {"y": {"dataset": DS, "column": "y"}, "A": {"dataset": DS, "columns": [2, 0]},
              "Z": {"dataset": DS, "columns": "X"}, "c": {"dataset": DS, "column": 1}}
    target = validate_job_spec(spec("sum(y) + sum(A @ x) + sum(Z @ c[0:3]) + sum(c)", params)).target
    for dtype in (torch.float64, torch.float32):
        built = build_target(target, BuildContext(dtype=dtype, load_dataset=loader({DS: DATA})))
        assert {value.dtype for value in built.params.values()} == {dtype}
        np.testing.assert_array_equal(built.params["y"].double().numpy(), Y.astype(np.dtype(str(dtype)[6:])))
        np.testing.assert_array_equal(built.params["A"].numpy(), X[:, [2, 0]].astype(np.dtype(str(dtype)[6:])))
        np.testing.assert_array_equal(built.params["Z"].numpy(), X.astype(np.dtype(str(dtype)[6:])))


def test_a_conjugate_regression_over_columns_matches_its_closed_form() -> None:
    params = {"y": {"dataset": DS, "column": "y"}, "A": {"dataset": DS, "columns": "X"}}
    raw = validate_job_spec(spec(REGRESSION, params, dim=3)).target
    target = build_target(raw, BuildContext(dtype=torch.float64, load_dataset=loader({DS: DATA})))
    # the exact Gaussian posterior N(m, S): S⁻¹ = AᵀA/σ² + I/τ², m = S Aᵀy/σ²
    sigma, tau = 0.3, 10.0
    precision = X.T @ X / sigma**2 + np.eye(3) / tau**2
    mean = np.linalg.solve(precision, X.T @ Y / sigma**2)
    points = RNG.normal(size=(5, 3))
    got = target.log_prob(torch.from_numpy(points)).numpy()
    quad = -0.5 * np.einsum("ni,ij,nj->n", points - mean, precision, points - mean)
    # log-density = Gaussian quadratic around the posterior mean + a constant: differences are exact
    np.testing.assert_allclose(got - got[0], quad - quad[0], rtol=1e-10, atol=1e-8)
    np.testing.assert_allclose(target.score(torch.from_numpy(points)).numpy(), -(points - mean) @ precision,
                               rtol=1e-10, atol=1e-8)
    constant = (-0.5 * ((Y[None] - points @ X.T) ** 2).sum(1) / sigma**2 - len(Y) * math.log(sigma * math.sqrt(2 * math.pi))
                - 0.5 * (points**2).sum(1) / tau**2 - 3 * math.log(tau * math.sqrt(2 * math.pi)))
    np.testing.assert_allclose(got, constant, rtol=1e-12)


def test_a_gp_over_a_built_in_sets_column() -> None:
    ref = "uci:yacht:split=0"
    data = load_builtin(ref)
    n = 30  # a GP over the first rows: the data set has 277, a slice keeps the test fast
    params = {"t": {"dataset": ref, "column": 0}, "y": {"dataset": ref, "column": "y"}}
    log_prob = (f"log_mvnormal(y[0:{n}], mean(y[0:{n}]), exp(2*x[0]) * exp(-0.5 * sqdist(t[0:{n}], t[0:{n}]) "
                f"/ exp(2*x[1])) + exp(2*x[2]) * eye({n}))")
    target = build_target(validate_job_spec(spec(log_prob, params, dim=3)).target, BuildContext(dtype=torch.float64))
    x = np.array([[1.0, 0.5, 0.0], [2.0, 1.0, -1.0]])
    from scipy import stats

    t, y = data.X[:n, 0], data.y[:n].astype(float)
    for row, got in zip(x, target.log_prob(torch.from_numpy(x)).numpy(), strict=True):
        cov = np.exp(2 * row[0]) * np.exp(-0.5 * np.subtract.outer(t, t) ** 2 / np.exp(2 * row[1]))
        cov += np.exp(2 * row[2]) * np.eye(n)
        assert got == pytest.approx(stats.multivariate_normal(np.full(n, y.mean()), cov).logpdf(y), rel=1e-10)


def test_the_builder_checks_again_against_what_it_loaded() -> None:
    params = {"y": {"dataset": DS, "column": "y"}, "A": {"dataset": DS, "columns": [0, 1]}}
    raw = validate_job_spec(spec(REGRESSION, params)).target
    # a loader that knows no such id (another tenant's, a deleted one): its own error, unchanged
    with pytest.raises(errors.TargetInvalid, match="no dataset"):
        build_target(raw, BuildContext(load_dataset=loader({})))
    with pytest.raises(errors.TargetInvalid, match="no dataset loader was given"):
        build_target(raw)
    narrow = Dataset(X=X[:, :1], y=Y)
    with pytest.raises(errors.TargetInvalid) as caught:
        build_target(raw, BuildContext(load_dataset=loader({DS: narrow})))
    assert caught.value.loc == ("target", "params", "A") and "column 1 is not a column" in caught.value.detail
    unlabelled = Dataset(X=X)
    with pytest.raises(errors.TargetInvalid, match="the data set has no y"):
        build_target(raw, BuildContext(load_dataset=loader({DS: unlabelled})))
    # each data set is loaded once however many params name it
    calls = []

    def counting(dataset_id: str) -> Dataset:
        calls.append(dataset_id)
        return DATA

    build_target(raw, BuildContext(load_dataset=counting))
    assert calls == [DS]
