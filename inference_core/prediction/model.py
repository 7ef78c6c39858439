"""The `model` block of a predictive artifact (`samplers.config.PredictiveModelConfig`), read off a target.

A prediction needs, besides weight or function draws: the task, the network a weight vector parameterises,
the training standardisation (inputs arrive and predictions leave in the data's original units) and the
observation noise (fixed, or an extra parameter of each draw). Targets without a network (a GP or piecewise
function prior) give `network: None`; targets that are not models of data give None.
"""

from __future__ import annotations

import math
from typing import Any

from inference_core.schemas.models import FixedNoise, GammaNoisePrecision, InverseGammaNoiseStd
from inference_core.targets.base import Target

#: The extra parameter of a weight vector that carries each draw's noise, by the BNN noise model.
NOISE_PARAMETER = {GammaNoisePrecision: "log_noise_precision", InverseGammaNoiseStd: "log_noise_std"}


def _standardization(target: Target, n_inputs: int) -> dict[str, Any] | None:
    stats = getattr(target, "standardization", None)
    if stats is None:
        return None
    return {
        "x_mean": [float(v) for v in stats.x_mean],
        "x_std": [float(v) for v in stats.x_std],
        "y_mean": None if stats.y_mean is None else float(stats.y_mean),
        "y_std": None if stats.y_std is None else float(stats.y_std),
    }


def _noise(target: Target) -> dict[str, Any] | None:
    noise = getattr(target, "noise", None)
    if isinstance(noise, FixedNoise):
        return {"type": "fixed", "std": float(noise.std)}
    if noise is not None:
        return {"type": "from_draw", "name": NOISE_PARAMETER[type(noise)]}
    noise_std = getattr(target, "noise_std", None)  # function_posterior: a fixed Gaussian likelihood
    if noise_std is not None and math.isfinite(noise_std):
        return {"type": "fixed", "std": float(noise_std)}
    return None


def predictive_model(target: Target) -> dict[str, Any] | None:
    """The JSON-ready `model` block for a `bnn` or `function_posterior` target, else None."""
    if target.kind not in ("bnn", "function_posterior"):
        return None
    task = getattr(target, "task", "regression")
    n_inputs = int(target.X.shape[1])
    network = getattr(target, "network", None)
    block: dict[str, Any] = {
        "task": task,
        "n_inputs": n_inputs,
        "n_classes": int(target.n_classes) if task == "classification" else None,
        "network": None if network is None else {
            "hidden": [int(width) for width in network.sizes[1:-1]],
            "activation": network.activation_name,
            "n_outputs": int(network.sizes[-1]),
        },
        "standardization": _standardization(target, n_inputs),
        "noise": _noise(target) if task == "regression" else None,
    }
    return block
