"""Exact log q of a generator's draws (samplers.density) against a brute-force reference: the full d × d
Jacobian of the float64 forward by autograd, log|det| by slogdet (no block structure used)."""

from __future__ import annotations

import pytest
import torch

from inference_core.samplers import GeneratorNetwork, Sampler, load
from inference_core.samplers.density import DensityUnavailable
from tests.support.log_det import brute_force_log_q


def make_sampler(k: int, d: int, lam: float, hidden: list[int], activation: str = "tanh",
                 affine: bool = False) -> Sampler:
    network = GeneratorNetwork(input_dim=k, hidden=hidden, output_dim=d, activation=activation, lam=lam,
                               generator=torch.Generator().manual_seed(3))
    shift_root = None
    if affine:
        g = torch.Generator().manual_seed(5)
        shift_root = (torch.randn(d, generator=g), torch.eye(d) + 0.3 * torch.randn(d, d, generator=g))
    return Sampler.from_generator(network, method="gpvi", target_kind="gaussian", affine=shift_root)


@pytest.mark.parametrize(("k", "d", "lam", "hidden", "affine"), [
    (4, 4, 0.7, [16, 16], False),       # k = d: det(∂g/∂z + λI)
    (2, 5, 0.5, [12], False),           # k < d: λ^(d−k) det(A + λI_k)
    (3, 6, 1.3, [8, 8], True),          # k < d with a whitened output map: + log|det root|
    (3, 3, 0.0, [10], False),           # amortised generator λ = 0, k = d: det ∂g/∂z
    (3, 3, 0.0, [], True),              # linear generator (Tables 1/2), whitened: det W · det root
    (2, 4, 0.3, [6], False),            # the default ReLU
])
def test_log_q_matches_autograd_log_det(k: int, d: int, lam: float, hidden: list[int], affine: bool) -> None:
    sampler = make_sampler(k, d, lam, hidden, activation="tanh" if hidden != [6] else "relu", affine=affine)
    draws, log_q = sampler.sample(64, seed=11, with_log_q=True)
    assert draws.dtype == torch.float32 and log_q.dtype == torch.float64 and log_q.shape == (64,)
    assert torch.equal(draws, sampler.sample(64, seed=11))  # log q changes nothing about the draws
    reference = brute_force_log_q(sampler, sampler.sample_noise(64, 11))
    torch.testing.assert_close(log_q, reference, rtol=1e-8, atol=0.0)


def test_log_q_is_a_density_in_one_dimension() -> None:
    """d = 1: q integrates to 1 over a grid of x (f is monotone for λ > Lip(g)), an independent check of sign
    and constants."""
    sampler = make_sampler(1, 1, 2.0, [6])
    z = torch.linspace(-9, 9, 40001, dtype=torch.float32)[:, None]
    x = sampler.forward(z)[:, 0].double()
    assert bool((x[1:] > x[:-1]).all())
    q = sampler.log_q(z).exp()
    assert abs(float(torch.trapezoid(q, x)) - 1.0) < 1e-6


def test_density_survives_the_zip_round_trip() -> None:
    sampler = make_sampler(2, 4, 0.9, [8], affine=True)
    again = load(sampler.to_zip_bytes())
    torch.testing.assert_close(again.sample(8, 2, with_log_q=True)[1], sampler.sample(8, 2, with_log_q=True)[1],
                               rtol=0, atol=0)


def test_degenerate_generator_has_no_density() -> None:
    sampler = make_sampler(2, 5, 0.0, [8])
    with pytest.raises(DensityUnavailable, match="manifold"):
        sampler.sample(4, 0, with_log_q=True)


def test_chunked_log_det_equals_one_pass(monkeypatch: pytest.MonkeyPatch) -> None:
    from inference_core.samplers import density

    sampler = make_sampler(3, 5, 0.8, [16])
    whole = sampler.sample(50, 4, with_log_q=True)[1]
    monkeypatch.setattr(density, "JACOBIAN_CHUNK_VALUES", 3 * 16 * 7)  # 7 draws per chunk
    torch.testing.assert_close(sampler.sample(50, 4, with_log_q=True)[1], whole, rtol=1e-12, atol=0)


def test_orientation_marks_a_folding_map() -> None:
    """A linear generator with W + λI of negative determinant keeps one (negative) orientation: not folded;
    a 1-D map that folds at 0 shows both signs among its draws."""
    network = GeneratorNetwork(input_dim=2, hidden=[], output_dim=2, activation="relu", lam=1.0)
    with torch.no_grad():
        network.output.weight.copy_(torch.tensor([[-3.0, 0.0], [0.0, 0.0]]))
    flipped = Sampler.from_generator(network, method="gpvi", target_kind="gaussian")
    density = flipped.density(flipped.sample_noise(20, 0))
    assert bool((density.orientation < 0).all()) and not density.folded
    fold = GeneratorNetwork(input_dim=1, hidden=[2], output_dim=1, activation="relu", lam=1.0)
    with torch.no_grad():  # g(z) = −4·relu(z) + 0: f(z) = z for z < 0, −3z for z > 0 — folds at 0
        fold.hidden[0].weight.copy_(torch.tensor([[1.0], [0.0]]))
        fold.hidden[0].bias.zero_()
        fold.output.weight.copy_(torch.tensor([[-4.0, 0.0]]))
        fold.output.bias.zero_()
    folded = Sampler.from_generator(fold, method="gpvi", target_kind="gaussian")
    assert folded.density(folded.sample_noise(20, 0)).folded
