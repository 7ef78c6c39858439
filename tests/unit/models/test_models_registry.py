"""Registry wiring: the model kinds validate, build and train through the same entry points as every kind."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from inference_core import errors
from inference_core.catalog import METHODS, TARGET_KINDS, WEIGHT_SPACE_KINDS
from inference_core.spec import Limits, validate_job_spec
from inference_core.targets import BuildContext, build_target
from inference_core.training import run

RNG = np.random.default_rng(0)
X = RNG.normal(size=(24, 2))
REAL = {"X": X.tolist(), "y": (X @ [1.0, -1.0] + 0.2 * RNG.normal(size=24)).tolist()}
BINARY = {"X": X.tolist(), "y": (X[:, 0] > 0).astype(int).tolist()}
CLASSES = {"X": X.tolist(), "y": (np.arange(24) % 3).tolist()}
DS_ID = "ds_" + "c" * 32

WEIGHT_SPACE_SPECS = {
    "bayesian_linear_regression": {"kind": "bayesian_linear_regression", "dataset": REAL, "prior_std": 3.0},
    "logistic_hierarchical": {"kind": "bayesian_logistic_regression", "dataset": BINARY, "batch_size": 8},
    "logistic_fixed": {"kind": "bayesian_logistic_regression", "dataset": BINARY, "prior_std": 1.0},
    "bnn_regression": {"kind": "bnn", "dataset": REAL, "hidden": [8], "batch_size": 10},
    "bnn_classification": {"kind": "bnn", "dataset": CLASSES, "task": "classification", "hidden": [8],
                           "weight_precision_prior": {"a0": 1.0, "b0": 0.1}},
    "bnn_builtin": {"kind": "bnn", "dataset": "uci:yacht:split=0", "standardize": True, "hidden": [10],
                    "batch_size": 32, "noise": {"type": "inverse_gamma_std", "alpha": 1.0, "beta": 0.1}},
}
FUNCTION_SPECS = {
    prior: {"kind": "function_posterior", "dataset": {"X": X[:, :1].tolist(), "y": REAL["y"]}, "prior": {"type": prior}}
    for prior in ("gp", "bnn", "piecewise_constant", "piecewise_linear")
}


def test_the_four_kinds_are_registered_and_function_posterior_is_not_weight_space() -> None:
    for name in ("bayesian_linear_regression", "bayesian_logistic_regression", "bnn", "function_posterior"):
        assert name in TARGET_KINDS
        TARGET_KINDS[name].schema.model_json_schema()  # the API lists every kind's schema
    assert "function_posterior" not in WEIGHT_SPACE_KINDS
    assert {"bayesian_linear_regression", "bayesian_logistic_regression", "bnn"} <= WEIGHT_SPACE_KINDS
    assert "function_posterior" not in METHODS["svgd"].target_kinds
    assert TARGET_KINDS["bayesian_linear_regression"].has_reference


@pytest.mark.parametrize("name", sorted(WEIGHT_SPACE_SPECS))
def test_svgd_accepts_each_weight_space_kind(name: str) -> None:
    job = validate_job_spec({"method": "svgd", "target": WEIGHT_SPACE_SPECS[name]})
    assert job.target["kind"] == WEIGHT_SPACE_SPECS[name]["kind"]
    assert build_target(job.target).dim == TARGET_KINDS[job.target["kind"]].schema.model_validate(job.target).dim


@pytest.mark.parametrize("prior", sorted(FUNCTION_SPECS))
def test_svgd_rejects_function_posterior(prior: str) -> None:
    with pytest.raises(errors.MethodUnsupportedForTarget) as caught:
        validate_job_spec({"method": "svgd", "target": FUNCTION_SPECS[prior]})
    assert caught.value.code == "method_unsupported_for_target"
    assert build_target(FUNCTION_SPECS[prior]).kind == "function_posterior"  # it still builds for its methods


@pytest.mark.parametrize(
    ("target", "message"),
    [
        ({"kind": "bnn", "dataset": "uci:concrete:split=20"}, "target.dataset: 'uci:concrete:split=20': concrete has 20"),
        ({"kind": "bnn", "dataset": REAL, "hidden": [0]}, "target.hidden.0"),
        ({"kind": "bnn", "dataset": REAL, "activation": "swish"}, "target.activation"),
        ({"kind": "bnn", "dataset": REAL, "batch_size": 0}, "target.batch_size"),
        ({"kind": "bnn", "dataset": REAL, "prior_std": -1}, "target.prior_std"),
        ({"kind": "bnn", "dataset": REAL, "hidden": [10] * 9}, "target.hidden"),
        ({"kind": "bnn", "dataset": REAL, "hidden": [5000]}, "target.hidden.0"),
        ({"kind": "bnn", "dataset": REAL, "task": "classification"}, "non-integers"),
        ({"kind": "bnn", "dataset": "uci:energy", "task": "classification"}, "regression data set"),
        ({"kind": "bnn", "dataset": REAL, "noise": {"type": "fixed", "std": 0}}, "target.noise.fixed.std"),
        ({"kind": "bnn", "dataset": CLASSES, "task": "classification", "noise": {"type": "fixed", "std": 1}},
         "'noise' is for regression"),
        ({"kind": "bnn", "dataset": REAL, "weight_precision_prior": {"a0": 1, "b0": 0}}, "b0"),
        ({"kind": "bnn", "dataset": REAL, "prior_std": 1, "weight_precision_prior": {"a0": 1, "b0": 1}}, "not both"),
        ({"kind": "bayesian_logistic_regression", "dataset": CLASSES}, "binary labels"),
        ({"kind": "bayesian_logistic_regression", "dataset": "sklearn:iris"}, "has 3 classes"),
        ({"kind": "bayesian_logistic_regression", "dataset": BINARY, "prior": {"a0": 1, "b0": 1}, "prior_std": 1},
         "not both"),
        ({"kind": "bayesian_linear_regression", "dataset": {"X": [[1.0, 2.0]], "y": [1.0]}}, "flat prior needs"),
        ({"kind": "bayesian_linear_regression", "dataset": {"X": [[1.0]]}}, "needs y"),
        ({"kind": "bayesian_linear_regression", "dataset": {"X": [[1.0] * 500] * 201, "y": [1.0] * 201}},
         "more than the cap of 100000"),
        ({"kind": "bayesian_linear_regression", "dataset": "ds_123"}, "not a built-in reference"),
        ({**FUNCTION_SPECS["gp"], "domain": [[1.0, 0.0]]}, "needs lo < hi"),
        ({**FUNCTION_SPECS["gp"], "domain": [[0.0, 1.0], [0.0, 1.0]]}, "domain has 2 intervals"),
        ({**FUNCTION_SPECS["gp"], "prior": {"type": "gp", "lengthscale": [1.0, 2.0]}}, "lengthscale has 2"),
        ({**FUNCTION_SPECS["gp"], "prior": {"type": "gp", "lengthscale": -1.0}}, "lengthscale must be positive"),
        ({**FUNCTION_SPECS["gp"], "dataset": REAL, "prior": {"type": "piecewise_constant"}}, "needs 1-D inputs"),
        ({**FUNCTION_SPECS["gp"], "prior": {"type": "spline"}}, "target.prior"),
        ({**FUNCTION_SPECS["gp"], "likelihood": {"noise_std": 0}}, "target.likelihood.noise_std"),
    ],
)
def test_bad_target_fields_are_target_invalid(target: dict, message: str) -> None:
    method = "svgd"
    with pytest.raises(errors.TargetInvalid) as caught:
        validate_job_spec({"method": method, "target": target})
    assert message in caught.value.detail, caught.value.detail


def test_dimension_cap_uses_the_dimension_computed_from_the_spec() -> None:
    spec = {"kind": "bnn", "dataset": "uci:protein:split=0", "hidden": [100, 100]}
    dim = TARGET_KINDS["bnn"].schema.model_validate(spec).dim
    assert dim == (9 * 100 + 100) + (100 * 100 + 100) + (100 + 1) + 1
    with pytest.raises(errors.LimitExceeded, match=f"target dimension {dim}"):
        validate_job_spec({"method": "svgd", "target": spec}, Limits(max_dim=dim - 1))
    validate_job_spec({"method": "svgd", "target": spec}, Limits(max_dim=dim))


def test_uploaded_dataset_specs_validate_without_data_and_build_with_a_loader() -> None:
    spec = {"kind": "bnn", "dataset": DS_ID, "task": "classification", "hidden": [4]}
    job = validate_job_spec({"method": "svgd", "target": spec})
    schema = TARGET_KINDS["bnn"].schema.model_validate(job.target)
    assert schema.dim is None and schema.dim_for(n_features=2, n_classes=3) == (2 * 4 + 4) + (4 * 3 + 3)
    context = BuildContext(load_dataset=lambda dataset_id: {"X": np.array(CLASSES["X"]), "y": np.array(CLASSES["y"])})
    assert build_target(job.target, context).dim == 27


@pytest.mark.parametrize("name", sorted(WEIGHT_SPACE_SPECS))
def test_a_short_svgd_run_on_each_weight_space_kind_stays_finite(name: str) -> None:
    result = run({"method": "svgd", "target": WEIGHT_SPACE_SPECS[name], "num_particles": 16, "steps": 15,
                  "seed": 1, "options": {"optimizer": {"name": "adam", "lr": 0.01}}})
    assert result.steps_completed == 15 and result.stopped is None
    assert result.particles.shape[0] == 16 and torch.isfinite(result.particles).all()
    assert torch.isfinite(result.method.target.log_prob(result.particles)).all()


def test_svgd_recovers_the_closed_form_linear_regression_posterior() -> None:
    """3-D, 100 particles, 1000 Adam steps. Tolerances: mean within 0.1 posterior std per coordinate;
    covariance within 25 % (relative Frobenius); SVGD with the median bandwidth under-disperses a little
    (about 14 % in variance here), which the bound allows."""
    rng = np.random.default_rng(0)
    X3 = rng.normal(size=(50, 3))
    y3 = X3 @ np.array([1.0, -0.5, 2.0]) + rng.normal(size=50)
    spec = {"method": "svgd", "num_particles": 100, "steps": 1000, "seed": 3,
            "target": {"kind": "bayesian_linear_regression", "dataset": {"X": X3.tolist(), "y": y3.tolist()}},
            "options": {"optimizer": {"name": "adam", "lr": 0.02}, "init": {"scale": 0.5}}}
    result = run(spec)
    particles = result.particles.double().numpy()
    # Independent closed form: unit noise, flat prior → N((XᵀX)⁻¹Xᵀy, (XᵀX)⁻¹).
    cov = np.linalg.inv(X3.T @ X3)
    mean = cov @ X3.T @ y3
    assert np.all(np.abs(particles.mean(0) - mean) < 0.1 * np.sqrt(np.diag(cov)))
    assert np.linalg.norm(np.cov(particles.T) - cov) / np.linalg.norm(cov) < 0.25
    # The run's own diagnostics use the target's reference: the same numbers.
    assert result.final_metrics["mean_error"] == pytest.approx(np.linalg.norm(particles.mean(0) - mean), abs=1e-5)
    assert result.final_metrics["cov_error_rel"] < 0.25


@pytest.mark.parametrize("name", sorted({**WEIGHT_SPACE_SPECS, "function_gp": FUNCTION_SPECS["gp"],
                                         "function_bnn": FUNCTION_SPECS["bnn"]}))
def test_to_changes_the_dtype_of_every_model_tensor(name: str) -> None:
    spec = {**WEIGHT_SPACE_SPECS, "function_gp": FUNCTION_SPECS["gp"], "function_bnn": FUNCTION_SPECS["bnn"]}[name]
    target64 = build_target(spec, BuildContext(dtype=torch.float64))
    theta = torch.as_tensor(np.random.default_rng(0).normal(size=(3, target64.dim)) * 0.3)
    expected = target64.log_prob(theta)
    target32 = target64.to(dtype=torch.float32)
    value = target32.log_prob(theta.float())
    assert value.dtype == torch.float32 and target32.score(theta.float()).dtype == torch.float32
    torch.testing.assert_close(value.double(), expected, rtol=1e-4, atol=1e-3)
