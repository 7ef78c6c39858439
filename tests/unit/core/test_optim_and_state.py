"""Optimiser rule and state serialisation against independent references."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from inference_core.methods.optim import AdagradMomentum
from inference_core.seeding import derive_seed, splitmix64
from inference_core.serialization import state_from_bytes, state_to_bytes


def original_svgd_update(theta: np.ndarray, grads: list[np.ndarray], stepsize: float, alpha: float = 0.9,
                         fudge: float = 1e-6) -> np.ndarray:
    """The update loop of Liu & Wang's python/svgd.py (ascent on the SVGD direction), re-typed."""
    historical = 0.0
    for it, grad in enumerate(grads):
        historical = grad**2 if it == 0 else alpha * historical + (1 - alpha) * grad**2
        theta = theta + stepsize * grad / (fudge + np.sqrt(historical))
    return theta


def test_adagrad_momentum_matches_the_original_svgd_code() -> None:
    rng = np.random.default_rng(0)
    theta0 = rng.normal(size=(5, 3))
    directions = [rng.normal(size=(5, 3)) for _ in range(6)]
    x = torch.tensor(theta0, requires_grad=True)
    optimizer = AdagradMomentum([x], lr=0.1, alpha=0.9, eps=1e-6)
    for phi in directions:
        x.grad = -torch.tensor(phi)  # our gradient is minus the ascent direction
        optimizer.step()
    np.testing.assert_allclose(x.detach().numpy(), original_svgd_update(theta0, directions, 0.1), rtol=1e-12)


def test_adagrad_momentum_rejects_bad_arguments() -> None:
    with pytest.raises(ValueError, match="alpha"):
        AdagradMomentum([torch.zeros(1, requires_grad=True)], lr=0.1, alpha=1.5)


def test_state_round_trip_keeps_types_and_bits() -> None:
    gen = torch.Generator().manual_seed(5)
    model = torch.nn.Linear(3, 2)
    opt = torch.optim.Adam(model.parameters())
    model(torch.randn(4, 3)).sum().backward()
    opt.step()
    state = {"opt": opt.state_dict(), "gen": gen.get_state(), "int_keys": {1: "a", 2: (1.5, None, True)},
             "h": torch.tensor(0.25, dtype=torch.float64), "nested": [torch.arange(3), {"x": "y"}]}
    back = state_from_bytes(state_to_bytes(state))
    assert back["int_keys"] == {1: "a", 2: (1.5, None, True)}
    assert back["h"].dtype == torch.float64 and float(back["h"]) == 0.25
    assert torch.equal(back["nested"][0], torch.arange(3)) and back["nested"][1] == {"x": "y"}
    restored = torch.Generator()
    restored.set_state(back["gen"])
    assert torch.equal(torch.rand(3, generator=restored), torch.rand(3, generator=gen))
    opt.load_state_dict(back["opt"])
    assert opt.state_dict()["param_groups"][0]["betas"] == (0.9, 0.999)


def test_unknown_objects_are_refused_not_pickled() -> None:
    with pytest.raises(TypeError, match="cannot serialise a object"):
        state_to_bytes({"bad": object()})


def test_splitmix64_reference_values() -> None:
    # First outputs of SplitMix64 seeded with 0 (Vigna's reference implementation, state advanced first).
    assert splitmix64(0) == 0xE220A8397B1DCDAF
    assert splitmix64(0x9E3779B97F4A7C15) == 0x6E789E6AA1B965F4
    assert derive_seed(1, 2) != derive_seed(2, 1)
