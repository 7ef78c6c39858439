"""Posterior predictive of a Bayesian neural network or of a function-space sampler (`/predict`, held-out metrics).

A `Predictor` turns posterior draws into predictions at inputs x given in the data's ORIGINAL units, using
the `model` block of the artifact (`samplers.config.PredictiveModelConfig`):
* weight draws θ_i [n, D] (a particle job's particles, or a hypernetwork sampler's draws): the network of
  the model block, evaluated for all draws at once with `targets.models.network.MLP` on the standardised
  inputs (x − x_mean)/x_std; a regression output is mapped back to y_mean + y_std · f;
* function draws of a function-space sampler, `sample(n, seed, x)` → [n, m] already in original units.

Regression: the equal-weight Gaussian mixture (1/n) Σ_i N(f_i(x), σ_i²) of `prediction.mixture`, with σ_i the
fixed noise std or the draw's own (exp(log σ), or exp(−log γ / 2) for a precision), times y_std →
`mean`, `std` (noise included), `std_epistemic` (spread of the f_i alone), `quantiles`.
Classification: `probs` = (1/n) Σ_i softmax(f_i(x)) [m, K] and the predictive `entropy` −Σ_k p_k log p_k.
The network runs in float32 (the precision of stored draws), everything after it in float64, on the CPU.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import torch
from torch import Tensor

from inference_core.prediction.mixture import mixture_moments, mixture_quantiles
from inference_core.samplers.config import DrawNoiseConfig, PredictiveModelConfig
from inference_core.targets.models.network import MLP

DEFAULT_QUANTILES = (0.025, 0.05, 0.5, 0.95, 0.975)
#: Draws taken from a sampler when the request does not say.
DEFAULT_SAMPLER_DRAWS = 100
MAX_QUANTILE_LEVELS = 99
#: Elements of one [draws, inputs, width] activation; inputs are pushed through the network in chunks below it.
FORWARD_CHUNK_ELEMENTS = 2**22
#: Elements of one [draws, inputs, ·] array of a prediction of weight draws (outputs, class probabilities, the
#: quantile search's [levels, draws, inputs]); `predict` works through the inputs in chunks below it, so what a
#: request holds at once is its weight draws plus a few such arrays (float64: 8 MiB each), whatever the inputs.
PREDICT_CHUNK_ELEMENTS = 2**20


class PredictionUnsupported(ValueError):
    """The object has no predictive model (not a BNN or function-space posterior, or draws that are not
    functions of new inputs, e.g. a GP prior's values at the training inputs)."""


def check_inputs(x: Any, n_inputs: int) -> Tensor:
    """Inputs as a float64 tensor [m, n_inputs] (m ≥ 1, finite); ValueError says what is wrong."""
    try:
        array = np.asarray(x, dtype=np.float64)
    except (TypeError, ValueError):
        raise ValueError("x must be a matrix of numbers [[...], ...] with rows of equal length") from None
    if array.ndim != 2 or array.shape[0] == 0:
        raise ValueError(f"x must be a non-empty matrix [m, {n_inputs}], got shape {list(array.shape)}")
    if array.shape[1] != n_inputs:
        raise ValueError(f"x has {array.shape[1]} columns but the model takes {n_inputs} inputs")
    if not np.isfinite(array).all():
        raise ValueError("x contains NaN or infinite values")
    return torch.from_numpy(array)


def check_levels(levels: Sequence[float] | None) -> tuple[float, ...]:
    if levels is None:
        return DEFAULT_QUANTILES
    values = tuple(float(q) for q in levels)
    if not values or len(values) > MAX_QUANTILE_LEVELS:
        raise ValueError(f"give between 1 and {MAX_QUANTILE_LEVELS} quantile levels")
    if not all(0 < q < 1 for q in values):
        raise ValueError("quantile levels must be strictly between 0 and 1")
    return values


def _check_draw_count(n: Any) -> None:
    if n is not None and (isinstance(n, bool) or not isinstance(n, int) or n < 1):
        raise ValueError(f"n must be an integer >= 1, got {n!r}")


class Predictor:
    """The predictive of one model block; subclasses say where the draws come from (`_draws`)."""

    def __init__(self, model: PredictiveModelConfig | dict[str, Any]):
        self.model = model if isinstance(model, PredictiveModelConfig) else PredictiveModelConfig.model_validate(model)
        stats = self.model.standardization
        self.x_mean = None if stats is None else torch.tensor(stats.x_mean, dtype=torch.float64)
        self.x_std = None if stats is None else torch.tensor(stats.x_std, dtype=torch.float64)
        self.y_mean = 0.0 if stats is None or stats.y_mean is None else float(stats.y_mean)
        self.y_std = 1.0 if stats is None or stats.y_std is None else float(stats.y_std)

    @property
    def task(self) -> str:
        return self.model.task

    @property
    def n_inputs(self) -> int:
        return self.model.n_inputs

    def default_draws(self) -> int:
        return DEFAULT_SAMPLER_DRAWS

    def standardize(self, x: Tensor) -> Tensor:
        return x if self.x_mean is None else (x - self.x_mean) / self.x_std

    def _prepared(self, n: int | None, seed: int) -> Any:
        """What the draws at every chunk of inputs share (weight draws: the weights); by default (n, seed)."""
        return n, seed

    def _evaluate(self, prepared: Any, x: Tensor) -> tuple[Tensor, Tensor | None]:
        """(outputs, noise std) of the prepared draws at x [m, p] (float64, original units): regression f [n, m]
        and σ [n] in original units; classification logits [n, m, K] and None."""
        raise NotImplementedError

    def _input_chunk(self, prepared: Any, m: int, per_input: int) -> int:
        """Inputs predicted at once when each costs `per_input` elements per draw: all m, unless the draws allow
        chunks (weight draws)."""
        return m

    def _draws(self, x: Tensor, n: int | None, seed: int) -> tuple[Tensor, Tensor | None]:
        return self._evaluate(self._prepared(n, seed), x)

    # ---- draws ---------------------------------------------------------------------------------------

    def regression_draws(self, x: Any, n: int | None = None, seed: int = 0) -> tuple[Tensor, Tensor]:
        """Function values f [n, m] and noise stds σ [n] of the draws at x, original units, float64."""
        if self.task != "regression":
            raise ValueError("regression draws of a classifier")
        _check_draw_count(n)
        f, noise_std = self._draws(check_inputs(x, self.n_inputs), n, seed)
        return f, noise_std  # type: ignore[return-value]

    def class_probabilities(self, x: Any, n: int | None = None, seed: int = 0) -> Tensor:
        """softmax(f_i(x)) per draw, [n, m, K] float64."""
        if self.task != "classification":
            raise ValueError("class probabilities of a regression model")
        _check_draw_count(n)
        logits, _ = self._draws(check_inputs(x, self.n_inputs), n, seed)
        return torch.softmax(logits, dim=-1)

    # ---- the predictive ------------------------------------------------------------------------------

    def predict(self, x: Any, n: int | None = None, seed: int = 0,
                quantiles: Sequence[float] | None = None) -> dict[str, Any]:
        """Predictive summaries at x [m, p] (original units) as float64 numpy arrays: regression `mean`,
        `std`, `std_epistemic` [m], `quantiles` [L, m] at `quantile_levels`; classification `probs` [m, K]
        and `entropy` [m]; plus `task` and `n_draws`."""
        levels = check_levels(quantiles) if self.task == "regression" else ()
        _check_draw_count(n)
        inputs = check_inputs(x, self.n_inputs)
        prepared = self._prepared(n, seed)
        # per input and draw: the outputs or class probabilities, and the quantile search's levels + 2 arrays
        per_input = len(levels) + 4 if self.task == "regression" else 3 * max(1, self.model.n_classes or 1)
        chunk = self._input_chunk(prepared, inputs.shape[0], per_input)
        parts = [self._summaries(prepared, inputs[s: s + chunk], levels) for s in range(0, inputs.shape[0], chunk)]
        first = parts[0]
        if self.task == "regression":
            return {"task": "regression", "n_draws": first["n_draws"], "quantile_levels": list(levels),
                    **{key: np.concatenate([part[key] for part in parts], axis=-1)
                       for key in ("mean", "std", "std_epistemic", "quantiles")}}
        return {"task": "classification", "n_draws": first["n_draws"],
                **{key: np.concatenate([part[key] for part in parts], axis=0) for key in ("probs", "entropy")}}

    def _summaries(self, prepared: Any, x: Tensor, levels: tuple[float, ...]) -> dict[str, Any]:
        """The predictive summaries at one chunk of inputs x [c, p]."""
        outputs, noise_std = self._evaluate(prepared, x)
        if self.task == "regression":
            mean, std, epistemic = mixture_moments(outputs, noise_std)
            values = mixture_quantiles(outputs, noise_std, list(levels))
            return {"n_draws": int(outputs.shape[0]), "mean": mean.numpy(), "std": std.numpy(),
                    "std_epistemic": epistemic.numpy(), "quantiles": values.numpy()}
        probs = torch.softmax(outputs, dim=-1).mean(0)
        entropy = torch.special.entr(probs).sum(-1)  # −Σ p log p with 0 log 0 = 0
        return {"n_draws": int(outputs.shape[0]), "probs": probs.numpy(), "entropy": entropy.numpy()}


class WeightPredictor(Predictor):
    """Draws are flat weight vectors of the model's network (layout `schemas.models.mlp_layout`)."""

    def __init__(self, model: PredictiveModelConfig | dict[str, Any], layout: list[dict[str, Any]],
                 draw_weights: Callable[[int | None, int], Tensor]):
        super().__init__(model)
        network = self.model.network
        if network is None:
            raise PredictionUnsupported("the model has no network: its draws are not weight vectors")
        layout = [dict(block) for block in layout]
        extras = [block["name"] for block in layout if not block["name"].startswith("layer")]
        self.network = MLP(self.model.n_inputs, network.hidden, network.n_outputs, network.activation, extras)
        if self.network.describe_layout() != [{"name": b["name"], "shape": list(b["shape"]), "offset": b["offset"]}
                                              for b in layout]:
            raise ValueError("the weight layout does not match the model's network")
        self.draw_weights = draw_weights
        noise = self.model.noise
        self.noise_block = noise.name if isinstance(noise, DrawNoiseConfig) else None
        self.fixed_noise_std = None if noise is None or self.noise_block else float(noise.std)

    def network_outputs(self, weights: Tensor, x_model: Tensor) -> Tensor:
        """Outputs [n, m, out] of every draw at standardised inputs, in chunks of inputs."""
        n = weights.shape[0]
        width = max(self.network.sizes)
        chunk = max(1, FORWARD_CHUNK_ELEMENTS // max(1, n * width))
        return torch.cat([self.network.forward(weights, x_model[s: s + chunk])
                          for s in range(0, x_model.shape[0], chunk)], dim=1)

    def noise_std(self, weights: Tensor) -> Tensor:
        """σ_i [n] in model (standardised) units, float64 (from the noise column alone: the weights may be large)."""
        if self.noise_block is None:
            return torch.full((weights.shape[0],), float(self.fixed_noise_std), dtype=torch.float64)
        u = self.network.extra(weights, self.noise_block).to(torch.float64)
        return torch.exp(u) if self.noise_block == "log_noise_std" else torch.exp(-0.5 * u)

    def _prepared(self, n: int | None, seed: int) -> Tensor:
        return self.draw_weights(n, seed).detach().to(device="cpu", dtype=torch.float32)

    def _input_chunk(self, prepared: Tensor, m: int, per_input: int) -> int:
        return max(1, min(m, PREDICT_CHUNK_ELEMENTS // max(1, prepared.shape[0] * per_input)))

    def _evaluate(self, weights: Tensor, x: Tensor) -> tuple[Tensor, Tensor | None]:
        # The network in float32, the precision draws are stored in (samplers and predictor archives are
        # float32; a float64 batched forward costs several times more), the mixture in float64.
        with torch.no_grad():
            outputs = self.network_outputs(weights, self.standardize(x).to(torch.float32)).to(torch.float64)
        if self.task == "classification":
            return outputs, None
        return self.y_mean + self.y_std * outputs[..., 0], self.y_std * self.noise_std(weights)


class FunctionPredictor(Predictor):
    """Draws are functions: a function-space sampler's `sample(n, seed, x)` → [n, m] in original units."""

    def __init__(self, model: PredictiveModelConfig | dict[str, Any], sampler: Any):
        super().__init__(model)
        if self.task != "regression" or self.model.noise is None or isinstance(self.model.noise, DrawNoiseConfig):
            raise PredictionUnsupported("a function-space sampler predicts regression with a fixed noise std")
        self.sampler = sampler
        self.noise_std_original = self.y_std * float(self.model.noise.std)

    def _evaluate(self, prepared: tuple[int | None, int], x: Tensor) -> tuple[Tensor, Tensor | None]:
        n, seed = prepared
        count = self.default_draws() if n is None else n
        with torch.no_grad():
            f = self.sampler.sample(count, seed, x.to(torch.float32))
        f = torch.as_tensor(f).to(device="cpu", dtype=torch.float64)
        if f.shape != (count, x.shape[0]):
            raise ValueError(f"the sampler returned draws of shape {list(f.shape)}, expected [{count}, {x.shape[0]}]")
        return f, torch.full((count,), self.noise_std_original, dtype=torch.float64)


def predictor_from_sampler(sampler: Any) -> Predictor:
    """The predictive of a trained sampler whose config carries a `model` block (BNN hypernetwork: weight
    draws through its layout; function-space sampler: function draws)."""
    config = sampler.config
    model = config.get("model")
    if model is None:
        raise PredictionUnsupported("this sampler has no predictive model (it was not trained on a bnn or "
                                    "function_posterior target)")
    if model.get("network") is None:
        return FunctionPredictor(model, sampler)

    def draw(n: int | None, seed: int) -> Tensor:
        return sampler.sample(DEFAULT_SAMPLER_DRAWS if n is None else n, seed)

    return WeightPredictor(model, config["layout"] or [], draw)


def predictor_for_method(method: Any) -> Predictor:
    """The predictive of a trained method: its sampler's (generative methods) or its particles' (an
    ensemble of weight vectors)."""
    from inference_core.prediction.ensemble import EnsemblePredictor
    from inference_core.prediction.model import predictive_model

    sampler = method.sampler()
    if sampler is not None:
        return predictor_from_sampler(sampler)
    model = predictive_model(method.target)
    if model is None or model["network"] is None:
        raise PredictionUnsupported(f"a {method.target.kind} target's particles have no predictive model")
    return EnsemblePredictor(model, method.target.describe_layout(), method.particles())
