"""Small targets and method builders shared by the f-POVI tests."""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from inference_core.catalog import METHODS, resolve
from inference_core.targets import BuildContext, build_target

RNG = np.random.default_rng(3)
X3 = RNG.normal(size=(60, 3))
Y3 = np.sin(X3[:, 0]) + 0.5 * X3[:, 1] + 0.1 * RNG.normal(size=60)


def regression_target_spec(**fields: Any) -> dict[str, Any]:
    spec = {"kind": "bnn", "dataset": {"X": X3.tolist(), "y": Y3.tolist()}, "standardize": True, "hidden": [16],
            "prior_std_scaling": "fan_out", "noise": {"type": "inverse_gamma_std"}, "batch_size": 16}
    return {**spec, **fields}


def build(method: str, target_spec: dict[str, Any], options: dict[str, Any] | None = None, n: int = 6,
          seed: int = 0, dtype: torch.dtype = torch.float64):
    """(method, target) built directly (no finiteness check), in float64 by default."""
    options = {"dtype": "float64" if dtype == torch.float64 else "float32", **(options or {})}
    info = METHODS[method]
    target = build_target(target_spec, BuildContext(dtype=dtype))
    return resolve(info.builder)(target, info.schema.model_validate(options), n, seed, torch.device("cpu")), target
