"""The posterior predictive (`inference_core.prediction`) against direct float64 computations: a per-draw
numpy forward pass, scipy's normal CDF and root finder for the mixture quantiles; archives, samplers, and
the coverage of its intervals on held-out data."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from scipy import optimize, special, stats

from inference_core import run
from inference_core.datasets import Dataset
from inference_core.metrics.regression import interval_coverage
from inference_core.prediction import (
    EnsemblePredictor,
    FunctionPredictor,
    PredictionUnsupported,
    ensemble_archive,
    load_ensemble,
    mixture_moments,
    mixture_quantiles,
    predictor_for_method,
    predictor_from_sampler,
)
from inference_core.samplers import load
from inference_core.schemas.models import mlp_layout
from inference_core.targets import BuildContext

ACTIVATIONS = {"tanh": np.tanh, "relu": lambda v: np.maximum(v, 0.0)}


def numpy_forward(weights: np.ndarray, X: np.ndarray, sizes: list[int], activation: str) -> np.ndarray:
    """Outputs [n, m, out], one draw at a time, reading the flat layout by hand (W [out, in] row-major, b)."""
    outputs = []
    for theta in weights:
        h, offset = X, 0
        for layer, (fan_in, fan_out) in enumerate(zip(sizes[:-1], sizes[1:], strict=True)):
            W = theta[offset: offset + fan_out * fan_in].reshape(fan_out, fan_in)
            offset += fan_out * fan_in
            b = theta[offset: offset + fan_out]
            offset += fan_out
            h = h @ W.T + b
            if layer < len(sizes) - 2:
                h = ACTIVATIONS[activation](h)
        outputs.append(h)
    return np.stack(outputs)


def mixture_cdf64(t: float, loc: np.ndarray, scale: np.ndarray) -> float:
    return float(stats.norm.cdf(t, loc=loc, scale=scale).mean())


def regression_model(noise: dict) -> dict:
    return {"task": "regression", "n_inputs": 2, "n_classes": None,
            "network": {"hidden": [5], "activation": "tanh", "n_outputs": 1},
            "standardization": {"x_mean": [1.0, -2.0], "x_std": [2.0, 0.5], "y_mean": 3.0, "y_std": 4.0},
            "noise": noise}


def layout(extras: list[str], n_inputs: int = 2, hidden: tuple[int, ...] = (5,), n_outputs: int = 1) -> list[dict]:
    return [block.as_dict() for block in mlp_layout(n_inputs, list(hidden), n_outputs, extras)]


# ---- the mixture --------------------------------------------------------------------------------------


def test_mixture_quantiles_match_a_root_finder_on_the_float64_cdf() -> None:
    rng = np.random.default_rng(0)
    loc = rng.normal(size=(7, 5)) * np.array([0.1, 1.0, 3.0, 10.0, 0.0])  # the last point: identical means
    scale = rng.uniform(0.05, 2.0, size=7)
    levels = [0.001, 0.025, 0.3, 0.5, 0.95, 0.999]
    got = mixture_quantiles(torch.tensor(loc), torch.tensor(scale), levels).numpy()
    for j in range(loc.shape[1]):
        for k, q in enumerate(levels):
            expected = optimize.brentq(lambda t, j=j, q=q: mixture_cdf64(t, loc[:, j], scale) - q, -100, 100,
                                       xtol=1e-14)
            assert got[k, j] == pytest.approx(expected, abs=1e-9)
    # One component: the Gaussian quantile in closed form; per-point scales [n, m] are accepted too.
    single = mixture_quantiles(torch.tensor([[1.0, -2.0]]), torch.tensor([[0.5, 3.0]]), [0.975]).numpy()
    np.testing.assert_allclose(single[0], [1.0 + 0.5 * stats.norm.ppf(0.975), -2.0 + 3.0 * stats.norm.ppf(0.975)],
                               rtol=1e-12)
    with pytest.raises(ValueError, match="strictly between"):
        mixture_quantiles(torch.tensor(loc), torch.tensor(scale), [0.0])


def test_mixture_moments_are_the_law_of_total_variance() -> None:
    rng = np.random.default_rng(1)
    loc, scale = rng.normal(size=(9, 4)), rng.uniform(0.1, 1.0, size=9)
    mean, std, epistemic = (t.numpy() for t in mixture_moments(torch.tensor(loc), torch.tensor(scale)))
    # Moments of the mixture density by quadrature on a fine grid.
    grid = np.linspace(-12, 12, 200_001)
    for j in range(4):
        density = stats.norm.pdf(grid[:, None], loc=loc[:, j], scale=scale).mean(1)
        m1 = np.trapezoid(grid * density, grid)
        m2 = np.trapezoid((grid - m1) ** 2 * density, grid)
        assert mean[j] == pytest.approx(m1, abs=1e-9) and std[j] == pytest.approx(np.sqrt(m2), rel=1e-7)
    np.testing.assert_allclose(epistemic, loc.std(0), rtol=1e-12)


# ---- weight draws -------------------------------------------------------------------------------------


@pytest.mark.parametrize("noise_name", ["log_noise_precision", "log_noise_std", None])
def test_regression_predictive_matches_a_direct_float64_computation(noise_name: str | None) -> None:
    rng = np.random.default_rng(2)
    extras = [noise_name] if noise_name else []
    noise = {"type": "from_draw", "name": noise_name} if noise_name else {"type": "fixed", "std": 0.3}
    blocks = layout(extras)
    dim = sum(int(np.prod(b["shape"])) for b in blocks)
    weights = rng.normal(size=(6, dim)).astype(np.float32)
    predictor = EnsemblePredictor(regression_model(noise), blocks, torch.from_numpy(weights))
    x = rng.normal(size=(8, 2)) * 3
    out = predictor.predict(x.tolist(), quantiles=[0.05, 0.5, 0.95])

    w64 = weights.astype(np.float64)
    f = 3.0 + 4.0 * numpy_forward(w64, (x - [1.0, -2.0]) / [2.0, 0.5], [2, 5, 1], "tanh")[..., 0]
    if noise_name == "log_noise_precision":
        sigma = 4.0 * np.exp(-0.5 * w64[:, -1])
    elif noise_name == "log_noise_std":
        sigma = 4.0 * np.exp(w64[:, -1])
    else:
        sigma = np.full(6, 4.0 * 0.3)
    assert out["task"] == "regression" and out["n_draws"] == 6
    # The draws: the network runs in float32 (the draws' own precision), so float32-level agreement.
    f_used, sigma_used = (t.numpy() for t in predictor.regression_draws(x))
    np.testing.assert_allclose(f_used, f, rtol=1e-5, atol=4e-5)
    np.testing.assert_allclose(sigma_used, sigma, rtol=1e-6)
    np.testing.assert_allclose(out["mean"], f.mean(0), rtol=1e-5, atol=4e-5)
    np.testing.assert_allclose(out["std"], np.sqrt(f.var(0) + (sigma**2).mean()), rtol=1e-5)
    # The summaries of those draws: float64 to rounding.
    np.testing.assert_allclose(out["mean"], f_used.mean(0), rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(out["std_epistemic"], f_used.std(0), rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(out["std"], np.sqrt(f_used.var(0) + (sigma_used**2).mean()), rtol=1e-12)
    assert out["quantiles"].shape == (3, 8) and out["quantile_levels"] == [0.05, 0.5, 0.95]
    for k, q in enumerate([0.05, 0.5, 0.95]):
        for j in range(8):
            assert mixture_cdf64(out["quantiles"][k, j], f_used[:, j], sigma_used) == pytest.approx(q, abs=1e-9)
    # The first n draws when n is given; more than the ensemble holds is an error.
    np.testing.assert_allclose(predictor.predict(x, n=2)["mean"], f_used[:2].mean(0), rtol=1e-12, atol=1e-12)
    with pytest.raises(ValueError, match="more than"):
        predictor.predict(x, n=7)


def test_classification_probs_are_mean_softmax_and_entropy_matches() -> None:
    rng = np.random.default_rng(3)
    model = {"task": "classification", "n_inputs": 3, "n_classes": 4,
             "network": {"hidden": [6, 5], "activation": "relu", "n_outputs": 4},
             "standardization": {"x_mean": [0.0, 1.0, 2.0], "x_std": [1.0, 2.0, 3.0], "y_mean": None, "y_std": None},
             "noise": None}
    blocks = layout([], 3, (6, 5), 4)
    weights = rng.normal(size=(5, sum(int(np.prod(b["shape"])) for b in blocks))).astype(np.float32)
    x = rng.normal(size=(10, 3))
    out = EnsemblePredictor(model, blocks, torch.from_numpy(weights)).predict(x)
    logits = numpy_forward(weights.astype(np.float64), (x - [0.0, 1.0, 2.0]) / [1.0, 2.0, 3.0], [3, 6, 5, 4], "relu")
    softmax = np.exp(logits - logits.max(-1, keepdims=True))
    probs = (softmax / softmax.sum(-1, keepdims=True)).mean(0)
    assert out["probs"].shape == (10, 4) and out["entropy"].shape == (10,)
    np.testing.assert_allclose(out["probs"].sum(1), 1.0, rtol=1e-12)
    np.testing.assert_allclose(out["probs"], probs, rtol=1e-5, atol=1e-7)  # float32 network
    np.testing.assert_allclose(out["entropy"], stats.entropy(out["probs"], axis=1), rtol=1e-12)
    np.testing.assert_allclose(out["entropy"], stats.entropy(probs, axis=1), rtol=1e-5)


def test_bad_inputs_are_refused_with_a_message() -> None:
    blocks = layout(["log_noise_std"])
    predictor = EnsemblePredictor(regression_model({"type": "from_draw", "name": "log_noise_std"}), blocks,
                                  torch.zeros(2, sum(int(np.prod(b["shape"])) for b in blocks)))
    for x, message in [([[1.0, 2.0, 3.0]], "columns"), ([[1.0], [2.0, 3.0]], "equal length"),
                       ([[float("nan"), 1.0]], "NaN"), ([], "non-empty"), ([1.0, 2.0], "non-empty")]:
        with pytest.raises(ValueError, match=message):
            predictor.predict(x)
    with pytest.raises(ValueError, match="between 0 and 1"):
        predictor.predict([[0.0, 0.0]], quantiles=[1.5])
    with pytest.raises(ValueError, match="does not match"):
        EnsemblePredictor(regression_model({"type": "fixed", "std": 1.0}), layout([], hidden=(4,)), torch.zeros(2, 17))


def test_ensemble_archive_round_trips_and_refuses_a_sampler_zip() -> None:
    rng = np.random.default_rng(4)
    blocks = layout(["log_noise_precision"])
    weights = torch.from_numpy(rng.normal(size=(3, sum(int(np.prod(b["shape"])) for b in blocks))).astype(np.float32))
    predictor = EnsemblePredictor(regression_model({"type": "from_draw", "name": "log_noise_precision"}), blocks,
                                  weights, method="svgd")
    blob = predictor.to_zip_bytes()
    assert blob == predictor.to_zip_bytes()
    again = load_ensemble(blob)
    assert again.config() == predictor.config() and again.config()["method"] == "svgd"
    x = rng.normal(size=(4, 2))
    for key in ("mean", "std", "quantiles"):
        np.testing.assert_array_equal(again.predict(x)[key], predictor.predict(x)[key])
    sampler = run({"method": "gpvi_exact", "num_particles": 4, "steps": 1,
                   "target": {"kind": "gaussian", "mean": [0.0], "cov": [[1.0]]}}).method.sampler()
    with pytest.raises(ValueError, match="not a Parvis predictor"):
        load_ensemble(sampler.to_zip_bytes())


# ---- samplers and methods ----------------------------------------------------------------------------

REGRESSION = {"kind": "bnn", "dataset": {"X": [[0.0, 1.0], [1.0, 3.0], [2.0, 2.0], [3.0, 7.0]],
                                         "y": [0.5, 1.0, 2.5, 2.0]}, "hidden": [4], "standardize": True}


def test_hypernetwork_sampler_predicts_from_its_seeded_weight_draws() -> None:
    sampler = run({"method": "amortized_svgd", "num_particles": 8, "steps": 3, "target": REGRESSION}).method.sampler()
    predictor = predictor_from_sampler(load(sampler.to_zip_bytes()))  # as the server loads it
    x = np.array([[0.5, 2.0], [4.0, -1.0], [1.0, 1.0]])
    out = predictor.predict(x, n=20, seed=5)
    model = sampler.config["model"]
    weights = sampler.sample(20, 5).numpy().astype(np.float64)
    std = model["standardization"]
    f = std["y_mean"] + std["y_std"] * numpy_forward(weights, (x - std["x_mean"]) / std["x_std"], [2, 4, 1],
                                                     "relu")[..., 0]
    sigma = std["y_std"] * np.exp(-0.5 * weights[:, -1])
    assert out["n_draws"] == 20
    np.testing.assert_allclose(out["mean"], f.mean(0), rtol=1e-5)
    np.testing.assert_allclose(out["std"], np.sqrt(f.var(0) + (sigma**2).mean()), rtol=1e-5)
    assert predictor.predict(x)["n_draws"] == 100  # the default for samplers
    np.testing.assert_array_equal(predictor.predict(x, n=20, seed=5)["quantiles"], out["quantiles"])


def test_targets_without_a_predictive_model_are_refused() -> None:
    gaussian = run({"method": "gpvi_exact", "num_particles": 4, "steps": 1,
                    "target": {"kind": "gaussian", "mean": [0.0], "cov": [[1.0]]}}).method
    with pytest.raises(PredictionUnsupported):
        predictor_for_method(gaussian)
    svgd = run({"method": "svgd", "num_particles": 4, "steps": 1,
                "target": {"kind": "gaussian", "mean": [0.0], "cov": [[1.0]]}}).method
    assert ensemble_archive(svgd) is None
    with pytest.raises(PredictionUnsupported):
        predictor_for_method(svgd)


class ToyFunctionSampler:
    """A stand-in for a function-space sampler: f_i(x) = a_i sin(x) + b_i with seeded (a_i, b_i), in original
    units, called as `sample(n, seed, x)`."""

    def __init__(self, model: dict):
        self.config = {"model": model}

    def sample(self, n: int, seed: int, x: torch.Tensor) -> torch.Tensor:
        g = torch.Generator().manual_seed(seed)
        a, b = torch.randn(n, 1, generator=g), torch.randn(n, 1, generator=g)
        return a * torch.sin(x[:, 0]) + b


def test_function_space_sampler_predictive() -> None:
    model = {"task": "regression", "n_inputs": 1, "network": None,
             "standardization": {"x_mean": [0.0], "x_std": [1.0], "y_mean": 1.0, "y_std": 2.0},
             "noise": {"type": "fixed", "std": 0.25}}
    toy = ToyFunctionSampler(model)
    predictor = predictor_from_sampler(toy)
    assert isinstance(predictor, FunctionPredictor)
    x = np.linspace(-2, 2, 7)[:, None]
    out = predictor.predict(x, n=30, seed=2, quantiles=[0.1])
    f = toy.sample(30, 2, torch.tensor(x, dtype=torch.float32)).numpy().astype(np.float64)
    np.testing.assert_allclose(out["mean"], f.mean(0), rtol=1e-12)
    np.testing.assert_allclose(out["std"], np.sqrt(f.var(0) + 0.5**2), rtol=1e-12)  # σ = 0.25 · y_std
    for j in range(7):
        assert mixture_cdf64(out["quantiles"][0, j], f[:, j], np.full(30, 0.5)) == pytest.approx(0.1, abs=1e-9)


def test_svgd_bnn_intervals_cover_their_nominal_share_of_held_out_points() -> None:
    """Synthetic data with known noise (σ = 0.5): the 90 % predictive interval of an SVGD BNN covers about
    90 % of 400 held-out points, and the held-out metrics of the run agree with the predictive."""
    rng = np.random.default_rng(0)

    def draw(n: int) -> tuple[np.ndarray, np.ndarray]:
        x = rng.uniform(-3, 3, size=(n, 1))
        return x, 2.0 + 1.5 * np.sin(x[:, 0]) + 0.5 * rng.standard_normal(n)

    (X, y), (X_test, y_test) = draw(300), draw(400)
    data = Dataset(X=X, y=y, X_test=X_test, y_test=y_test, name="synthetic")
    spec = {"method": "svgd", "num_particles": 30, "steps": 600, "seed": 0,
            "target": {"kind": "bnn", "dataset": "ds_" + "0" * 32, "hidden": [20]},
            "options": {"optimizer": {"name": "adam", "lr": 0.02}}}
    result = run(spec, context=BuildContext(load_dataset=lambda _: data))
    out = predictor_for_method(result.method).predict(X_test, quantiles=[0.05, 0.95])
    coverage = interval_coverage(y_test, out["quantiles"][0], out["quantiles"][1])
    assert 0.8 <= coverage <= 0.97, coverage
    assert 0.4 < float(np.mean(out["std"])) < 0.65  # the noise is learnt: σ = 0.5 plus a little epistemic
    # The run's held-out metrics: RMSE of this predictive mean, LL of this mixture (original units).
    f, sigma = predictor_for_method(result.method).regression_draws(X_test)
    ll = stats.norm.logpdf(y_test, loc=f.numpy(), scale=sigma.numpy()[:, None])
    expected_ll = np.mean(np.log(np.exp(ll).mean(0)))
    assert result.final_metrics["test_rmse"] == pytest.approx(np.sqrt(np.mean((out["mean"] - y_test) ** 2)), rel=1e-9)
    assert result.final_metrics["test_ll"] == pytest.approx(expected_ll, rel=1e-9)
    assert result.final_metrics["test_rmse"] < 0.6 and result.final_metrics["test_ll"] > -0.9


def test_fvi_sampler_predictive_and_held_out_metrics() -> None:
    """A trained FVI sampler (generator kind "spg"): the predictive is the mixture of its function draws at x
    (original units) with the model's fixed noise std × y_std; the run reports held-out metrics from it."""
    rng = np.random.default_rng(6)
    X, X_test = rng.uniform(0, 3, size=(30, 1)), rng.uniform(0, 3, size=(20, 1))
    y, y_test = 4 + 2 * np.cos(X[:, 0]), 4 + 2 * np.cos(X_test[:, 0])
    data = Dataset(X=X, y=y, X_test=X_test, y_test=y_test, name="synthetic")
    spec = {"method": "fvi", "num_particles": 4, "steps": 30,
            "target": {"kind": "function_posterior", "dataset": "ds_" + "2" * 32, "standardize": True,
                       "prior": {"type": "gp", "lengthscale": 0.5}, "likelihood": {"noise_std": 0.1}},
            "options": {"distill_steps": 20, "n_basis": 6, "latent_dim": 3}}
    result = run(spec, context=BuildContext(load_dataset=lambda _: data))
    sampler = load(result.method.sampler().to_zip_bytes())
    predictor = predictor_from_sampler(sampler)
    assert isinstance(predictor, FunctionPredictor)
    x = np.linspace(-0.5, 3.5, 9)[:, None]
    out = predictor.predict(x, n=40, seed=3)
    f = sampler.sample(40, 3, x).numpy().astype(np.float64)
    model = sampler.config["model"]
    sigma = model["noise"]["std"] * model["standardization"]["y_std"]
    np.testing.assert_allclose(model["standardization"]["y_std"], y.std(), rtol=1e-12)
    np.testing.assert_allclose(out["mean"], f.mean(0), rtol=1e-12)
    np.testing.assert_allclose(out["std"], np.sqrt(f.var(0) + sigma**2), rtol=1e-12)
    for k, q in enumerate(out["quantile_levels"]):
        for j in range(9):
            assert mixture_cdf64(out["quantiles"][k, j], f[:, j], np.full(40, sigma)) == pytest.approx(q, abs=1e-9)
    # Held-out metrics: 100 draws with seed 0 at the test inputs, original units.
    f_test = sampler.sample(100, 0, X_test).numpy().astype(np.float64)
    ll = special.logsumexp(stats.norm.logpdf(y_test, loc=f_test, scale=sigma), axis=0) - np.log(100)
    assert result.final_metrics["test_rmse"] == pytest.approx(np.sqrt(np.mean((f_test.mean(0) - y_test) ** 2)),
                                                              rel=1e-5)
    assert result.final_metrics["test_ll"] == pytest.approx(ll.mean(), rel=1e-5)


# ---- memory: the inputs in chunks ---------------------------------------------------------------------

@pytest.mark.parametrize("task", ["regression", "classification"])
def test_predict_in_chunks_of_inputs_equals_one_chunk(task: str, monkeypatch) -> None:
    """`predict` works through the inputs in chunks of PREDICT_CHUNK_ELEMENTS; the summaries of each input do
    not depend on the chunking (the draws are shared, each input's mixture is its own) beyond the float32 rounding
    of the network's matmuls, which on some CPUs depends on the number of rows (Intel Xeon, 2026-11-29: up to
    9e-7 relative; bit-identical on the AMD EPYC machines before). A wrong chunking (a draw or an input mixed
    up) moves a summary by far more."""
    from inference_core.prediction import predictive

    rng = np.random.default_rng(5)
    if task == "regression":
        model, blocks = regression_model({"type": "from_draw", "name": "log_noise_std"}), layout(["log_noise_std"])
    else:
        model = {**regression_model(None), "task": "classification", "n_classes": 3,
                 "network": {"hidden": [5], "activation": "tanh", "n_outputs": 3}}
        blocks = layout([], n_outputs=3)
    dim = sum(int(np.prod(b["shape"])) for b in blocks)
    predictor = EnsemblePredictor(model, blocks, torch.from_numpy(rng.normal(size=(7, dim)).astype(np.float32)))
    x = (rng.normal(size=(50, 2)) * 2).tolist()
    whole = predictor.predict(x, quantiles=[0.1, 0.5, 0.9] if task == "regression" else None)
    monkeypatch.setattr(predictive, "PREDICT_CHUNK_ELEMENTS", 7 * 9)  # a few inputs per chunk
    chunked = predictor.predict(x, quantiles=[0.1, 0.5, 0.9] if task == "regression" else None)
    assert chunked.keys() == whole.keys()
    for key, value in whole.items():
        if isinstance(value, np.ndarray):
            np.testing.assert_allclose(chunked[key], value, rtol=1e-5, atol=1e-6, err_msg=key)
        else:
            assert chunked[key] == value, key


MEMORY_PROBE = """
import ctypes, json, sys
import numpy as np, torch
ctypes.CDLL("libc.so.6").mallopt(-3, 1 << 20)  # the API's allocator setting (app.api.compute.unmap_large_frees)
torch.set_num_threads(1)
from inference_core.prediction import EnsemblePredictor
from inference_core.schemas.models import mlp_layout
task, hidden, outs = sys.argv[1], [256, 256], 1 if sys.argv[1] == "regression" else 10
model = {"task": task, "n_inputs": 4, "n_classes": None if task == "regression" else outs, "standardization": None,
         "network": {"hidden": hidden, "activation": "tanh", "n_outputs": outs},
         "noise": {"type": "from_draw", "name": "log_noise_std"} if task == "regression" else None}
blocks = [b.as_dict() for b in mlp_layout(4, hidden, outs, ["log_noise_std"] if task == "regression" else [])]
dim = sum(int(np.prod(b["shape"])) for b in blocks)
predictor = EnsemblePredictor(model, blocks, torch.randn(1000, dim) * 0.1)
x = np.random.default_rng(0).normal(size=(2000, 4)).tolist()
predictor.predict(x[:5])
def high_water_kb():
    return next(int(line.split()[1]) for line in open("/proc/self/status") if line.startswith("VmHWM"))
with open("/proc/self/clear_refs", "w") as f:
    f.write("5")  # the peak RSS (VmHWM) starts again from the current RSS
before = high_water_kb()
predictor.predict(x)
print(json.dumps((high_water_kb() - before) / 1024))
"""


@pytest.mark.parametrize("task", ["regression", "classification"])
def test_a_prediction_at_the_caps_holds_a_bounded_working_set(task: str) -> None:
    """1,000 draws of a 4 → 256 → 256 → out network at 2,000 inputs (the default cap of 2·10⁶ values): before the
    inputs were chunked the prediction grew the process's peak RSS by 560 MB (regression: a float64 copy of every
    weight) and 685 MB (10 classes: [n, m, K] logits and their softmax); the working set must now stay within the
    half of the default 256 MiB request budget that /predict leaves it (app.api.routes.predict.check_draw_memory;
    measured 68 and 82 MB), in a fresh process with the API's allocator (peak RSS from VmHWM, reset before the
    call; Linux)."""
    import json
    import subprocess
    import sys

    out = subprocess.run([sys.executable, "-c", MEMORY_PROBE, task], capture_output=True, text=True, check=True,
                         env={**__import__("os").environ, "OMP_NUM_THREADS": "1"})
    growth_mb = json.loads(out.stdout.strip().splitlines()[-1])
    assert growth_mb < 128, growth_mb
