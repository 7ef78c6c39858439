"""BNN target: batched forward against a naive per-particle loop, log density against scipy, scores against
finite differences, layout, initialisation and prior draws."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from scipy import special, stats
from torch.profiler import ProfilerActivity, profile

from inference_core import errors
from inference_core.schemas.models import BNNSpec
from inference_core.targets import BuildContext, build_target

CONTEXT = BuildContext(dtype=torch.float64)
NUMPY_ACTIVATIONS = {
    "relu": lambda z: np.maximum(z, 0.0),
    "tanh": np.tanh,
    "sigmoid": special.expit,
    "softplus": lambda z: np.logaddexp(0.0, z),
    "gelu": lambda z: 0.5 * z * (1 + special.erf(z / np.sqrt(2))),
    "silu": lambda z: z * special.expit(z),
    "elu": lambda z: np.where(z > 0, z, np.expm1(z)),
    "leaky_relu": lambda z: np.where(z > 0, z, 0.01 * z),
}


def regression_data(n: int = 25, p: int = 3, seed: int = 0):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, p))
    return X, np.sin(X).sum(1) + 0.1 * rng.normal(size=n)


def classification_data(n: int = 25, p: int = 3, k: int = 3, seed: int = 0):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, p))
    return X, (np.arange(n) % k).astype(int)


def bnn(X, y, **fields):
    spec = {"kind": "bnn", "dataset": {"X": X.tolist(), "y": y.tolist()}, **fields}
    return build_target(spec, CONTEXT)


def naive_forward(theta: np.ndarray, X: np.ndarray, sizes: list[int], activation: str) -> np.ndarray:
    """Independent reference: unpack each particle by the documented layout (per layer weight [out, in]
    row-major then bias [out]) and run an explicit per-particle, per-layer matmul loop in float64."""
    act = NUMPY_ACTIVATIONS[activation]
    outputs = []
    for row in theta:
        offset, h = 0, X
        for layer, (fan_in, fan_out) in enumerate(zip(sizes[:-1], sizes[1:], strict=True)):
            W = row[offset: offset + fan_out * fan_in].reshape(fan_out, fan_in)
            offset += fan_out * fan_in
            b = row[offset: offset + fan_out]
            offset += fan_out
            h = h @ W.T + b
            if layer < len(sizes) - 2:
                h = act(h)
        outputs.append(h)
    return np.stack(outputs)


@pytest.mark.parametrize("activation", sorted(NUMPY_ACTIVATIONS))
def test_batched_forward_of_64_particles_equals_a_naive_loop(activation: str) -> None:
    X, y = regression_data()
    model = bnn(X, y, hidden=[7, 5], activation=activation, noise={"type": "fixed", "std": 0.3})
    theta = torch.randn(64, model.dim, dtype=torch.float64, generator=torch.Generator().manual_seed(0))
    batched = model.forward(theta, model.X)
    assert batched.shape == (64, 25, 1)
    expected = naive_forward(theta.numpy(), X, [3, 7, 5, 1], activation)
    # 1e-9: torch.nn.functional.softplus is linear beyond 20 (an e^-20 approximation).
    np.testing.assert_allclose(batched.numpy(), expected, rtol=1e-9, atol=1e-9)


def aten_op_count(fn) -> int:
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        fn()
    return sum(1 for event in prof.events() if event.name.startswith("aten::"))


def test_forward_is_one_batched_pass_not_a_loop_over_particles() -> None:
    X, y = regression_data()
    model = bnn(X, y, hidden=[16, 8], activation="tanh")
    small, large = (torch.randn(n, model.dim, dtype=torch.float64) for n in (2, 64))
    # The number of torch ops does not grow with the number of particles ...
    assert aten_op_count(lambda: model.forward(small, model.X)) == aten_op_count(lambda: model.forward(large, model.X))
    assert aten_op_count(lambda: model.log_prob(small)) == aten_op_count(lambda: model.log_prob(large))

    # ... whereas a per-particle loop (the thing this test must catch) does grow.
    def looped(theta):
        return torch.cat([model.forward(theta[i: i + 1], model.X) for i in range(theta.shape[0])])

    torch.testing.assert_close(looped(large), model.forward(large, model.X))
    assert aten_op_count(lambda: looped(large)) > 10 * aten_op_count(lambda: looped(small))


def scipy_log_joint(theta: np.ndarray, X: np.ndarray, y: np.ndarray, fields: dict, sizes: list[int]) -> np.ndarray:
    """Independent log joint with scipy densities and the naive forward."""
    n_weights = sum(i * o + o for i, o in zip(sizes[:-1], sizes[1:], strict=True))
    f = naive_forward(theta[:, :n_weights], X, sizes, fields.get("activation", "relu"))
    out = []
    for index, row in enumerate(theta):
        weights, extras = row[:n_weights], list(row[n_weights:])
        total = 0.0
        noise = fields.get("noise")
        if fields.get("task") == "classification":
            total += (special.log_softmax(f[index], axis=-1)[np.arange(len(y)), y]).sum()
        elif noise["type"] == "fixed":
            total += stats.norm(f[index, :, 0], noise["std"]).logpdf(y).sum()
        elif noise["type"] == "gamma_precision":
            u = extras.pop(0)
            total += stats.norm(f[index, :, 0], np.exp(-u / 2)).logpdf(y).sum()
            total += stats.gamma(noise["a0"], scale=1 / noise["b0"]).logpdf(np.exp(u)) + u
        else:
            u = extras.pop(0)
            total += stats.norm(f[index, :, 0], np.exp(u)).logpdf(y).sum()
            total += stats.invgamma(noise["alpha"], scale=noise["beta"]).logpdf(np.exp(u)) + u
        if "weight_precision_prior" in fields:
            u = extras.pop(0)
            prior = fields["weight_precision_prior"]
            total += stats.norm(0, np.exp(-u / 2)).logpdf(weights).sum()
            total += stats.gamma(prior["a0"], scale=1 / prior["b0"]).logpdf(np.exp(u)) + u
        else:
            stds = []
            for fan_in, fan_out in zip(sizes[:-1], sizes[1:], strict=True):
                fan = {"none": 1, "fan_in": fan_in, "fan_out": fan_out}[fields.get("prior_std_scaling", "none")]
                stds += [fields.get("prior_std", 1.0) / np.sqrt(fan)] * (fan_in * fan_out + fan_out)
            total += stats.norm(0, np.array(stds)).logpdf(weights).sum()
        assert not extras
        out.append(total)
    return np.array(out)


REGRESSION_CASES = [
    {"noise": {"type": "gamma_precision", "a0": 1.0, "b0": 0.1}, "prior_std": 0.8},
    {"noise": {"type": "fixed", "std": 0.3}, "weight_precision_prior": {"a0": 2.0, "b0": 0.5}},
    {"noise": {"type": "inverse_gamma_std", "alpha": 1.5, "beta": 0.2}, "prior_std": 1.0,
     "prior_std_scaling": "fan_out", "activation": "tanh"},
    {"noise": {"type": "gamma_precision", "a0": 3.0, "b0": 2.0}, "prior_std": 2.0, "prior_std_scaling": "fan_in",
     "weight_precision_prior": None, "activation": "gelu"},
]


@pytest.mark.parametrize("fields", REGRESSION_CASES)
def test_regression_log_prob_equals_an_independent_log_joint(fields: dict) -> None:
    fields = {key: value for key, value in fields.items() if value is not None}
    X, y = regression_data()
    model = bnn(X, y, hidden=[6], **fields)
    theta = np.random.default_rng(1).normal(size=(4, model.dim)) * 0.5
    expected = scipy_log_joint(theta, X, y, fields, [3, 6, 1])
    np.testing.assert_allclose(model.log_prob(torch.as_tensor(theta)).numpy(), expected, rtol=1e-10)


def test_classification_log_prob_equals_an_independent_log_joint() -> None:
    X, y = classification_data(k=4)
    fields = {"task": "classification", "activation": "softplus", "prior_std": 1.3}
    model = bnn(X, y, hidden=[5, 4], **fields)
    assert model.n_classes == 4 and model.network.sizes == [3, 5, 4, 4]
    theta = np.random.default_rng(2).normal(size=(3, model.dim))
    expected = scipy_log_joint(theta, X, y, fields, [3, 5, 4, 4])
    np.testing.assert_allclose(model.log_prob(torch.as_tensor(theta)).numpy(), expected, rtol=1e-10)


def central_differences(fn, theta: torch.Tensor, step: float = 1e-6) -> torch.Tensor:
    grad = torch.zeros_like(theta)
    for j in range(theta.shape[1]):
        offset = torch.zeros_like(theta)
        offset[:, j] = step
        grad[:, j] = (fn(theta + offset) - fn(theta - offset)) / (2 * step)
    return grad


@pytest.mark.parametrize(
    "fields",
    [
        {**REGRESSION_CASES[0], "activation": "relu"},
        REGRESSION_CASES[1],
        REGRESSION_CASES[2],
        {"task": "classification", "activation": "tanh", "weight_precision_prior": {"a0": 1.0, "b0": 0.1}},
        {"task": "classification", "activation": "relu", "n_classes": 5, "batch_size": 8},
        {**REGRESSION_CASES[0], "batch_size": 6},
    ],
)
def test_score_matches_central_finite_differences(fields: dict) -> None:
    classification = fields.get("task") == "classification"
    X, y = classification_data() if classification else regression_data()
    model = bnn(X, y, hidden=[4, 3], **fields)
    batch = model.sample_batch(torch.Generator().manual_seed(3))
    assert (batch is None) == ("batch_size" not in fields)
    theta = torch.as_tensor(np.random.default_rng(4).normal(size=(3, model.dim)) * 0.6)
    numeric = central_differences(lambda t: model.log_prob(t, batch), theta)
    torch.testing.assert_close(model.score(theta, batch), numeric, rtol=1e-5, atol=1e-6)


def test_layout_is_documented_and_agrees_with_the_schema() -> None:
    X, y = regression_data(p=2)
    fields = {"hidden": [3], "weight_precision_prior": {"a0": 1.0, "b0": 0.1}}
    model = bnn(X, y, **fields)
    assert model.describe_layout() == [
        {"name": "layer0.weight", "shape": [3, 2], "offset": 0},
        {"name": "layer0.bias", "shape": [3], "offset": 6},
        {"name": "layer1.weight", "shape": [1, 3], "offset": 9},
        {"name": "layer1.bias", "shape": [1], "offset": 12},
        {"name": "log_noise_precision", "shape": [], "offset": 13},
        {"name": "log_weight_precision", "shape": [], "offset": 14},
    ]
    spec = BNNSpec(dataset={"X": X.tolist(), "y": y.tolist()}, **fields)
    assert model.dim == spec.dim == spec.dim_for(2) == 15
    # Extras sit where the layout says: changing log γ changes only the noise precision.
    theta = torch.zeros(1, 15, dtype=torch.float64)
    theta[0, 13] = np.log(4.0)
    assert model.log_noise_std(theta).item() == pytest.approx(np.log(0.5))


def test_initial_particles_follow_the_svgd_bnn_init() -> None:
    X, y = regression_data(n=50, p=4)
    model = bnn(X, y, hidden=[30], weight_precision_prior={"a0": 1.0, "b0": 0.1})
    init = model.initial_particles(400, torch.Generator().manual_seed(0))
    assert torch.equal(init, model.initial_particles(400, torch.Generator().manual_seed(0)))
    layers = model.network.unpack(init)
    (w1, b1), (w2, b2) = layers
    assert torch.all(b1 == 0) and torch.all(b2 == 0)
    assert w1.var().item() == pytest.approx(1 / 5, rel=0.05) and w2.var().item() == pytest.approx(1 / 31, rel=0.05)
    # With N ≤ 1000 every row is used: log γ = −log(MSE of each initial network on the data).
    f = model.forward(init, model.X)[..., 0]
    mse = (f - model.y).square().mean(-1)
    torch.testing.assert_close(init[:, -2], -mse.log())
    lam = init[:, -1].exp().numpy()  # λ₀ ~ Gamma(a0, SCALE b0), as numpy's gamma in the original code
    assert stats.kstest(lam, stats.gamma(1.0, scale=0.1).cdf).pvalue > 1e-3
    assert torch.isfinite(model.log_prob(init)).all()


def test_prior_draws_have_the_prior_distribution() -> None:
    X, y = regression_data()
    model = bnn(X, y, hidden=[5], prior_std=2.0, prior_std_scaling="fan_in",
                noise={"type": "inverse_gamma_std", "alpha": 3.0, "beta": 2.0})
    draws = model.sample_prior(20_000, torch.Generator().manual_seed(1))
    (w1, b1), (w2, _) = model.network.unpack(draws)
    assert w1.std().item() == pytest.approx(2.0 / np.sqrt(3), rel=0.02)
    assert b1.std().item() == pytest.approx(2.0 / np.sqrt(3), rel=0.02)
    assert w2.std().item() == pytest.approx(2.0 / np.sqrt(5), rel=0.02)
    sigma = draws[:, -1].exp().numpy()
    assert stats.kstest(sigma, stats.invgamma(3.0, scale=2.0).cdf).pvalue > 1e-3


def test_classification_labels_are_checked() -> None:
    X, y = classification_data(k=3)
    with pytest.raises(errors.TargetInvalid, match="label 2 but n_classes is 2"):
        build_target({"kind": "bnn", "task": "classification", "n_classes": 2, "dataset": "ds_" + "a" * 32},
                     BuildContext(load_dataset=lambda _: {"X": X, "y": y}))
    with pytest.raises(errors.TargetInvalid, match="integer class labels"):
        build_target({"kind": "bnn", "task": "classification", "dataset": "ds_" + "a" * 32},
                     BuildContext(load_dataset=lambda _: {"X": X, "y": y + 0.5}))
    model = bnn(X, y, task="classification", n_classes=6)
    assert model.network.sizes[-1] == 6 and model.y.dtype == torch.int64
