"""validate_job_spec: every bad input is an InferenceError with a stable code and a useful detail."""

from __future__ import annotations

import math

import pytest

from inference_core import errors
from inference_core.spec import Limits, spec_fingerprint, validate_job_spec

GOOD = {"method": "svgd", "target": {"kind": "gaussian", "mean": [0.0, 1.0], "cov": [[1.0, 0.3], [0.3, 2.0]]}}


def spec(**changes: object) -> dict:
    out = {**GOOD, **changes}
    return out


def test_good_spec_is_normalised_with_defaults() -> None:
    job = validate_job_spec(spec())
    assert job.num_particles == 100 and job.steps == 1000 and job.seed == 0
    assert job.options["optimizer"]["name"] == "adam"
    assert job.options["kernel"]["bandwidth"]["rule"] == "median"
    assert job.target == {"kind": "gaussian", "mean": [0.0, 1.0], "cov": [[1.0, 0.3], [0.3, 2.0]], "precision": None}


@pytest.mark.parametrize(
    ("raw", "error", "fragment"),
    [
        (spec(method="nope"), errors.MethodUnknown, "unknown method 'nope'"),
        (spec(target={"kind": "weird"}), errors.TargetUnknown, "unknown target kind 'weird'"),
        (spec(target={"mean": [0.0]}), errors.TargetUnknown, "unknown target kind None"),
        (spec(target={"kind": "gaussian", "mean": [0, 0], "cov": [[1, 2], [2, 1]]}), errors.TargetInvalid,
         "not positive definite"),
        (spec(target={"kind": "gaussian", "mean": [0, 0], "cov": [[1, 0.5], [0.4, 1]]}), errors.TargetInvalid,
         "symmetric"),
        (spec(target={"kind": "gaussian", "mean": [0, 0], "cov": [[1, 0], [0]]}), errors.TargetInvalid, "cov"),
        (spec(target={"kind": "gaussian", "mean": [0, 0, 0], "cov": [[1, 0], [0, 1]]}), errors.TargetInvalid,
         "shape [3, 3]"),
        (spec(target={"kind": "gaussian", "mean": [0.0, math.nan], "cov": [[1, 0], [0, 1]]}), errors.SpecInvalid,
         "target.mean.1: NaN"),
        (spec(options={"optimizer": {"lr": math.inf}}), errors.SpecInvalid, "options.optimizer.lr: NaN"),
        (spec(options={"optimizer": {"lr": -1}}), errors.MethodOptionsInvalid, "options.optimizer.lr"),
        (spec(options={"no_such_option": 1}), errors.MethodOptionsInvalid, "options.no_such_option"),
        (spec(num_particles=0), errors.SpecInvalid, "num_particles"),
        (spec(steps="many"), errors.SpecInvalid, "steps"),
        (spec(surprise=True), errors.SpecInvalid, "surprise"),
        (spec(num_particles=10_001), errors.LimitExceeded, "num_particles 10001 is over the cap of 10000"),
        (spec(steps=5001), errors.LimitExceeded, "steps 5001 is over the cap of 5000"),
        ([1, 2], errors.SpecInvalid, "JSON object"),
    ],
)
def test_bad_specs_are_rejected_with_a_code(raw: object, error: type, fragment: str) -> None:
    with pytest.raises(error) as caught:
        validate_job_spec(raw, Limits(max_particles=10_000, max_steps=5000, max_dim=10))
    assert fragment in caught.value.detail
    assert caught.value.code == error.code


def test_dimension_cap() -> None:
    wide = {"kind": "gaussian", "mean": [0.0] * 11, "cov": [[float(i == j) for j in range(11)] for i in range(11)]}
    with pytest.raises(errors.LimitExceeded, match="dimension 11"):
        validate_job_spec(spec(target=wide), Limits(max_dim=10))


def test_precision_form_is_accepted() -> None:
    job = validate_job_spec(spec(target={"kind": "gaussian", "mean": [0, 0], "precision": [[2, 0], [0, 2]]}))
    assert job.target["precision"] == [[2.0, 0.0], [0.0, 2.0]]
    with pytest.raises(errors.TargetInvalid, match="exactly one"):
        validate_job_spec(spec(target={"kind": "gaussian", "mean": [0, 0]}))


def test_fingerprint_is_canonical() -> None:
    a = validate_job_spec(spec(seed=1)).model_dump(mode="json")
    b = validate_job_spec({"seed": 1, **GOOD}).model_dump(mode="json")
    assert spec_fingerprint(a) == spec_fingerprint(b)
    assert spec_fingerprint(a) != spec_fingerprint(validate_job_spec(spec(seed=2)).model_dump(mode="json"))


GAUSSIAN_2D = {"kind": "gaussian", "mean": [0.0, 0.0], "cov": [[1.0, 0.0], [0.0, 1.0]]}


@pytest.mark.parametrize(("method", "n", "options", "refused"), [
    ("svgd", 11_585, {}, False),  # 11,585² < 2²⁷ distances: the largest exact median
    ("svgd", 11_586, {}, True),
    ("svgd", 50_000, {"kernel": {"bandwidth": {"rule": "median_subsampled"}}}, False),
    ("gfsf", 20_000, {"kernel": {"bandwidth": {"rule": "running_average"}}}, True),  # of the exact median
    ("svgd_subset", 50_000, {}, False),  # the cross median over n × m pairs
    ("svgd_subset", 50_000, {"bandwidth": {"source": "kernel"}}, True),
])
def test_an_exact_median_over_too_many_particles_is_refused_at_submit(method: str, n: int, options: dict,
                                                                      refused: bool) -> None:
    """Before, such a job was accepted and the worker failed it mid-run with `internal_error`."""
    spec = {"method": method, "target": GAUSSIAN_2D, "num_particles": n, "options": options}
    if not refused:
        validate_job_spec(spec)
        return
    with pytest.raises(errors.MethodOptionsInvalid, match="exact median of all n² pairwise distances") as caught:
        validate_job_spec(spec)
    assert caught.value.loc == ("options", "kernel", "bandwidth", "rule")


def test_the_memory_estimate_counts_the_exact_medians_distances() -> None:
    from inference_core.catalog import METHODS
    from inference_core.memory import EXACT_MEDIAN_COPIES, job_memory_bytes

    def estimate(options: dict) -> int:
        return job_memory_bytes("svgd", "particle", METHODS["svgd"].schema.model_validate(options), 10_000, 2)

    exact, subsampled = estimate({}), estimate({"kernel": {"bandwidth": {"rule": "median_subsampled"}}})
    assert exact - subsampled == EXACT_MEDIAN_COPIES * 10_000**2 * 4  # float32 distances, sorted on a GPU


def test_a_data_set_target_gets_the_exact_median_check_once_its_dimension_is_known() -> None:
    """For a target over an uploaded data set, admission without the data set's shape cannot size the job; given
    the shape (the service passes `Datasets.shapes`), the model's dimension follows from it and the memory cap
    and the exact-median refusal apply."""
    from inference_core.datasets.columns import DatasetShape
    from inference_core.spec import admit

    bnn = {"kind": "bnn", "dataset": "ds_" + "0" * 32, "hidden": [4]}
    shapes = {bnn["dataset"]: DatasetShape(n_rows=50, n_features=8, has_y=True)}
    spec = {"method": "svgd", "target": bnn, "num_particles": 12_000}
    assert admit(spec).dim is None  # library use: not sized, not refused
    with pytest.raises(errors.MethodOptionsInvalid, match="refused beyond 11,585 particles"):
        admit(spec, Limits(), shapes)
    with pytest.raises(errors.LimitExceeded, match="memory estimate"):
        admit({**spec, "num_particles": 100}, Limits(max_job_memory_bytes=1024), shapes)
    admitted = admit({**spec, "num_particles": 10}, Limits(), lambda ids: shapes)
    assert admitted.dim == 8 * 4 + 4 + 4 * 1 + 1 + 1  # a 8-4-1 network's weights and biases, the noise's log γ
    assert admitted.dataset_ids == (bnn["dataset"],)
    with pytest.raises(errors.TargetInvalid, match="no dataset"):
        admit(spec, Limits(), {})
