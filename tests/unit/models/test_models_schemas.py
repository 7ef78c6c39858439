"""Model schemas: defaults, dimensions from the spec alone, layouts, and stable normalisation."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from inference_core.catalog import TARGET_KINDS
from inference_core.schemas.models import (
    ACTIVATIONS,
    BayesianLinearRegressionSpec,
    BayesianLogisticRegressionSpec,
    BNNSpec,
    FunctionPosteriorSpec,
    layout_size,
    mlp_layout,
)
from inference_core.targets import build_target
from inference_core.targets.models.network import ACTIVATION_FUNCTIONS

INLINE = {"X": [[0.0, 1.0], [1.0, 0.0], [2.0, 2.0]], "y": [0.5, 1.5, 2.5]}


def test_defaults_are_filled_in_and_visible_in_the_normalised_spec() -> None:
    bnn = BNNSpec(dataset="uci:concrete:split=0").model_dump(mode="json")
    assert bnn["hidden"] == [50] and bnn["activation"] == "relu" and bnn["prior_std"] == 1.0
    assert bnn["noise"] == {"type": "gamma_precision", "a0": 1.0, "b0": 0.1}
    logistic = BayesianLogisticRegressionSpec(dataset="sklearn:breast_cancer").model_dump(mode="json")
    assert logistic["prior"] == {"a0": 1.0, "b0": 0.01} and logistic["prior_std"] is None and logistic["bias"]
    linear = BayesianLinearRegressionSpec(dataset=INLINE).model_dump(mode="json")
    assert linear["noise_std"] == 1.0 and linear["prior_std"] is None and not linear["bias"]
    function = FunctionPosteriorSpec(dataset=INLINE, prior={"type": "bnn"}).model_dump(mode="json")
    assert function["prior"]["prior_std"] == 1.0 and function["likelihood"] == {"noise_std": 1.0}


@pytest.mark.parametrize(
    "spec",
    [
        {"kind": "bnn", "dataset": "uci:yacht:split=3", "weight_precision_prior": {"a0": 1, "b0": 0.1}},
        {"kind": "bnn", "dataset": "sklearn:digits", "task": "classification", "hidden": [32, 16]},
        {"kind": "bayesian_logistic_regression", "dataset": "sklearn:breast_cancer", "prior_std": 2.0},
        {"kind": "bayesian_linear_regression", "dataset": INLINE, "bias": True},
        {"kind": "function_posterior", "dataset": INLINE, "prior": {"type": "gp", "lengthscale": [1.0, 2.0]},
         "domain": [[0, 1], [-1, 1]]},
    ],
)
def test_normalisation_is_idempotent_and_dim_matches_the_built_target(spec: dict) -> None:
    schema = TARGET_KINDS[spec["kind"]].schema
    once = schema.model_validate(spec).model_dump(mode="json")
    assert schema.model_validate(once).model_dump(mode="json") == once  # workers re-validate stored specs
    assert schema.model_validate(once).dim == build_target(once).dim


def test_dim_for_uses_the_shape_of_a_stored_data_set() -> None:
    ds = "ds_" + "d" * 32
    assert BayesianLinearRegressionSpec(dataset=ds, bias=True).dim_for(5) == 6
    assert BayesianLogisticRegressionSpec(dataset=ds).dim_for(5) == 7  # bias + log α
    assert BayesianLogisticRegressionSpec(dataset=ds, prior_std=1, bias=False).dim_for(5) == 5
    regression = BNNSpec(dataset=ds, hidden=[10], noise={"type": "fixed", "std": 1})
    assert regression.dim is None and regression.dim_for(5) == 5 * 10 + 10 + 10 + 1
    classification = BNNSpec(dataset=ds, task="classification", hidden=[10])
    assert classification.dim_for(5, n_classes=4) == 5 * 10 + 10 + 10 * 4 + 4
    with pytest.raises(ValueError, match="n_classes"):
        classification.dim_for(5)
    gp = FunctionPosteriorSpec(dataset=ds, prior={"type": "gp"})
    assert gp.dim_for(3, n_rows=40) == 40
    with pytest.raises(ValueError, match="number of training rows"):
        gp.dim_for(3)
    assert FunctionPosteriorSpec(dataset=ds, prior={"type": "bnn", "hidden": [4]}).dim_for(3) == 3 * 4 + 4 + 4 + 1


def test_mlp_layout_is_contiguous_row_major_with_extras_last() -> None:
    layout = mlp_layout(3, [4, 2], 5, ["log_noise_precision", "log_weight_precision"])
    assert [(b.name, b.shape) for b in layout] == [
        ("layer0.weight", (4, 3)), ("layer0.bias", (4,)), ("layer1.weight", (2, 4)), ("layer1.bias", (2,)),
        ("layer2.weight", (5, 2)), ("layer2.bias", (5,)), ("log_noise_precision", ()), ("log_weight_precision", ()),
    ]
    offsets = [b.offset for b in layout]
    assert offsets == [0, 12, 16, 24, 26, 36, 41, 42]
    assert all(a.offset + a.size == b.offset for a, b in zip(layout, layout[1:], strict=False))
    assert layout_size(layout) == 43


def test_inline_data_is_strict_about_numbers() -> None:
    for bad in ({"X": [["1"]], "y": [1]}, {"X": [[True]], "y": [1]}, {"X": [[1.0]], "y": ["1"]},
                {"X": [[1.0]], "y": [None]}):
        with pytest.raises(ValidationError, match="must be a number"):
            BNNSpec(dataset=bad)
    with pytest.raises(ValidationError, match="Extra inputs"):
        BNNSpec(dataset={**INLINE, "X_test": [[1.0, 2.0]]})


def test_function_posterior_is_torch_free_to_validate_with_every_prior() -> None:
    for prior in ({"type": "gp"}, {"type": "bnn", "hidden": [3]}):
        FunctionPosteriorSpec(dataset=INLINE, prior=prior)
    one_d = {"X": [[0.0], [1.0]], "y": [0.0, 1.0]}
    for kind in ("piecewise_constant", "piecewise_linear"):
        spec = FunctionPosteriorSpec(dataset=one_d, prior={"type": kind, "values": {"distribution": "uniform",
                                                                                     "low": -1, "high": 1}})
        assert spec.dim == 2
    with pytest.raises(ValidationError, match="low < high"):
        FunctionPosteriorSpec(dataset=one_d, prior={"type": "piecewise_constant",
                                                    "values": {"distribution": "uniform", "low": 1, "high": 1}})


def test_every_schema_activation_has_an_implementation() -> None:
    assert set(ACTIVATIONS) == set(ACTIVATION_FUNCTIONS)
    for name in ACTIVATIONS:
        BNNSpec(dataset=INLINE, activation=name)
