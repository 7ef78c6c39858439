"""The predictive `model` block of a sampler config: built from the target, validated, kept through the zip."""

from __future__ import annotations

import numpy as np
import pytest

from inference_core import run
from inference_core.samplers import load
from inference_core.samplers.config import validate_config

REGRESSION = {"kind": "bnn", "dataset": {"X": [[0.0, 1.0], [1.0, 3.0], [2.0, 2.0], [3.0, 7.0]],
                                         "y": [0.5, 1.0, 2.5, 2.0]},
              "hidden": [4], "standardize": True}


def _sampler(target: dict) -> object:
    result = run({"method": "amortized_svgd", "num_particles": 8, "steps": 2, "target": target})
    return result.method.sampler()


def test_bnn_regression_sampler_carries_network_standardisation_and_noise() -> None:
    sampler = _sampler(REGRESSION)
    model = sampler.config["model"]
    X = np.array(REGRESSION["dataset"]["X"])
    y = np.array(REGRESSION["dataset"]["y"])
    assert model["task"] == "regression" and model["n_inputs"] == 2 and model["n_classes"] is None
    assert model["network"] == {"hidden": [4], "activation": "relu", "n_outputs": 1}
    np.testing.assert_allclose(model["standardization"]["x_mean"], X.mean(0))
    np.testing.assert_allclose(model["standardization"]["x_std"], X.std(0))
    assert model["standardization"]["y_mean"] == pytest.approx(y.mean())
    assert model["standardization"]["y_std"] == pytest.approx(y.std())
    assert model["noise"] == {"type": "from_draw", "name": "log_noise_precision"}  # the default Gamma prior
    assert load(sampler.to_zip_bytes()).config["model"] == model


def test_classifier_sampler_has_classes_and_no_noise() -> None:
    target = {"kind": "bnn", "task": "classification", "hidden": [3],
              "dataset": {"X": [[0.0], [1.0], [2.0], [3.0]], "y": [0, 1, 2, 1]}}
    model = _sampler(target).config["model"]
    assert model["task"] == "classification" and model["n_classes"] == 3 and model["noise"] is None
    assert model["network"]["n_outputs"] == 3 and model["standardization"] is None


def test_non_model_target_has_no_model_block() -> None:
    sampler = _sampler({"kind": "gaussian", "mean": [0.0, 1.0], "cov": [[1.0, 0.0], [0.0, 2.0]]})
    assert sampler.config["model"] is None


@pytest.mark.parametrize("change, message", [
    ({"task": "regression", "noise": None}, "noise model"),
    ({"task": "classification", "n_classes": None, "noise": None}, "n_classes"),
    ({"noise": {"type": "from_draw", "name": "log_noise_std"}}, "not in the layout"),
    ({"standardization": {"x_mean": [0.0], "x_std": [1.0], "y_mean": 0.0, "y_std": 1.0}}, "n_inputs"),
])
def test_inconsistent_model_blocks_are_refused(change: dict, message: str) -> None:
    config = _sampler(REGRESSION).config
    config["model"] = {**config["model"], **change}
    with pytest.raises(ValueError, match=message):
        validate_config(config)
