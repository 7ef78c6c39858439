"""Function-space particle optimisation (f-POVI; Wang, Ren, Zhu & Zhang, ICLR 2019): `fsvgd`, `fwsgld`,
`fpisgld`.

Particles are network weights θ_i (n flat vectors in the target's layout), but the POVI update is computed
on their function values. Each step (Algorithm 1; authors' code thu-ml/fpovi `ffn/bnn_stein_f.py`):

1. mixed batch x = x_b ∪ x̃ (line 4): the target's B training rows plus E extra points, training rows drawn
   without replacement and perturbed by N(0, (ptb_scale/√(N·D))²) (the KDE ν of §3.1.2);
2. function values F = [f(x; θ_i)]_i, [n, M] (classification: [n, M, K] normalised logits, App. B.3);
3. ∇_F log p(F | data) = N·∇ mean_b log p(y_b | f_b, σ_i) on the B training columns plus the gradient of a
   Gaussian fitted to fresh prior functions at 4 columns (`moments`, §3.2), not N-scaled;
4. v = the POVI direction (Table 1: SVGD, w-SGLD-B or pi-SGLD) on the n points F (flattened), RBF kernel with
   the full-matrix median bandwidth, constant in the step;
5. pull-back (eq. 4): θ_i ← θ_i + ε (∂f(x; θ_i)/∂θ_i)ᵀ v_i, the VJP of v applied with Adam (`pullback`);
6. regression: per-particle σ_i = softplus(raw_i), MAP under the target's noise prior with its own Adam
   step, on the same (pre-update) function values (the code's std_raw step after the weight step).

The f-POVI checklist of the project's reference notes, item by item: (1) network, prior and init come from the
target (`hidden=[50]`, `prior_std_scaling="fan_out"`) and `options.init="fpovi"`; (2) data preparation and
splits belong to the reproduction harness (the bnn target standardises X by its std, not std·√D); (3)
`extra_points`, `ptb_scale`; (4)-(5) `prior_draws`, `prior_points`, `eigen_floor`; (6) the N·mean likelihood
plus the unscaled prior (`function_score`); (7) `kernel` (full-matrix median, log(n+1)) and `bandwidth_floor`;
(8) `methods.directions`; (9) `optimizer`, `pullback`; (10) `noise_init`, `noise_optimizer` and the target's
noise prior; (11)-(12) schedule and reporting belong to the harness. Not implemented: the paper's per-input
down-sampling of classes for many-class classifiers (App. B.3); all K outputs are used.

Steps 1-5's direction (mixed batch, function values, score, kernel, POVI direction, VJP) lives in the mixin
`FunctionSpaceDirection`, shared with `amortized_fsvgd` (methods/generative/amortized_fsvgd.py), which pulls the
same f-SVGD direction back through the network and then through a generator of weights.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor

from inference_core import errors
from inference_core.kernels import Kernel, bandwidth_rule_from_options, kernel_from_options
from inference_core.methods.base import Method, check_direction
from inference_core.methods.directions import (
    pisgld_direction,
    pisgld_direction_rows,
    svgd_direction,
    svgd_direction_rows,
    wsgld_direction,
    wsgld_direction_rows,
)
from inference_core.methods.function_space.moments import fit_gaussian, gaussian_score, prior_columns
from inference_core.methods.optim import build_optimizer
from inference_core.schemas.function_space import FunctionSpaceDirectionOptions, FunctionSpacePOVIOptions
from inference_core.schemas.models import FixedNoise, GammaNoisePrecision, InverseGammaNoiseStd
from inference_core.seeding import derive_seed
from inference_core.targets.base import Target
from inference_core.targets.counting import record_evaluations
from inference_core.targets.models.bnn import gaussian_log_likelihood_sum
from inference_core.targets.models.network import MLP

Direction = Callable[..., Tensor]


def inverse_softplus(value: float) -> float:
    """raw with softplus(raw) = value."""
    return value + math.log(-math.expm1(-value))


def fpovi_initial_weights(network: MLP, n: int, seed: int) -> Tensor:
    """[n, n_weights] float64: weights N(0, 1)/√(fan_in + fan_out + 1), biases 0 (thu-ml/fpovi `rf.py`
    init_bnn_weight); row i from its own stream (seed, 2, i), so it does not depend on n."""
    theta = torch.zeros(n, network.n_weights, dtype=torch.float64)
    generator = torch.Generator()
    for i in range(n):
        generator.manual_seed(derive_seed(seed, 2, i))
        for layer, (fan_out, fan_in) in enumerate(network.layer_shapes()):
            block = network.blocks[f"layer{layer}.weight"]
            noise = torch.randn(block.size, generator=generator, dtype=torch.float64)
            theta[i, block.offset: block.offset + block.size] = noise / math.sqrt(fan_in + fan_out + 1)
    return theta


class FunctionSpaceDirection:
    """The pieces of an f-POVI step that produce the function-space direction (Algorithm 1, lines 4-7): the mixed
    batch, the function values, their score under the likelihood and the fitted-Gaussian prior, the kernel and
    the POVI direction v on the flattened values, the VJP (∂F/∂W)ᵀ v and the noise prior. Shared by the f-POVI
    methods (`FunctionSpacePOVI`, which moves n weight vectors) and `amortized_fsvgd`
    (`methods.generative.amortized_fsvgd`, which moves a generator of weight vectors).

    The host class is a `Method` with `options` (`FunctionSpaceDirectionOptions`), `target`, `dtype`, and
    `generator`, the CPU `torch.Generator` that draws the extras and the prior functions; it calls
    `init_function_space(target)` in its constructor. The network is the target's (`function_network`).
    """

    name: str
    #: the weights only parametrise the functions the direction moves (Method.target_space_checks)
    target_space_checks = False
    options: FunctionSpaceDirectionOptions
    target: Target
    generator: torch.Generator
    povi_direction: Direction = staticmethod(svgd_direction)

    def init_function_space(self, target: Target) -> None:
        """Check the target and read the network, its weight prior, the task, the noise model and the bandwidth
        rule off it (no random draws)."""
        self._check_target(target)
        self.function_network: MLP = target.network  # type: ignore[attr-defined]
        self.weight_prior = target.weight_prior  # type: ignore[attr-defined]
        self.task = getattr(target, "task", "regression")
        self.noise_model = self._noise_model(target)
        self.bandwidth_rule = bandwidth_rule_from_options(self.options.kernel.bandwidth,
                                                          backend=self.options.kernel.backend)

    # ---- target checks --------------------------------------------------------------------------------

    def _check_target(self, target: Target) -> None:
        kind = getattr(target, "kind", None)
        if kind not in ("bnn", "function_posterior"):
            raise errors.MethodUnsupportedForTarget(
                f"method {self.name!r} needs a 'bnn' or 'function_posterior' (bnn prior) target, got {kind!r}",
                loc=("method",))
        if kind == "function_posterior" and getattr(target, "network", None) is None:
            raise errors.MethodUnsupportedForTarget(
                f"method {self.name!r} needs a function_posterior target with a 'bnn' prior (it pulls the update "
                f"back through the network's weights); got a {target.prior_type!r} prior",  # type: ignore[attr-defined]
                loc=("target", "prior", "type"))
        if kind == "bnn" and target.weight_prior.hierarchical is not None:  # type: ignore[attr-defined]
            raise errors.MethodUnsupportedForTarget(
                f"method {self.name!r} needs a fixed weight prior (prior_std); the hierarchical "
                "weight_precision_prior has no function-space counterpart here", loc=("target",))

    def _noise_model(self, target: Target) -> object | None:
        if self.task != "regression":
            return None
        if target.kind == "function_posterior":
            return FixedNoise(std=target.noise_std)  # type: ignore[attr-defined]
        return target.noise  # type: ignore[attr-defined]

    @property
    def noise_learned(self) -> bool:
        return isinstance(self.noise_model, GammaNoisePrecision | InverseGammaNoiseStd)

    @property
    def fixed_noise_std(self) -> float:
        return self.noise_model.std if isinstance(self.noise_model, FixedNoise) else 1.0

    # ---- function values and their VJP --------------------------------------------------------------

    def function_values(self, weights: Tensor, points: Tensor) -> Tensor:
        """f(points; θ_i) for weights [n, n_weights]: [n, M] (regression) or [n, M, K] normalised logits."""
        outputs = self.function_network.forward(self._padded(weights), points)
        if self.task == "regression":
            return outputs[..., 0]
        if self.options.classification_values == "log_softmax":
            return torch.log_softmax(outputs, dim=-1)
        return outputs

    def _padded(self, weights: Tensor) -> Tensor:
        """Weights with zero extras appended, in the network's layout (the forward ignores extras)."""
        missing = self.function_network.dim - weights.shape[1]
        return weights if missing == 0 else F.pad(weights, (0, missing))

    @staticmethod
    def function_vjp(values: Tensor, weights: Tensor, direction: Tensor) -> Tensor:
        """(∂f(x; θ_i)/∂θ_i)ᵀ v_i for every particle, [n, n_weights]: function values [n, M] (or [n, M, K]) with
        their graph to `weights` [n, n_weights], and a function-space direction v of the same shape (paper eq. 4).
        One VJP through the batched network."""
        if direction.shape != values.shape:
            raise ValueError(f"direction must have the shape of the function values {list(values.shape)}, "
                             f"got {list(direction.shape)}")
        with torch.enable_grad():
            (grad,) = torch.autograd.grad(values, weights, direction.detach().to(values.dtype))
        return grad

    # ---- the pieces of one step ---------------------------------------------------------------------------

    def mixed_batch(self, batch: Tensor | None) -> tuple[Tensor, int]:
        """(points [B + E', p], B): the batch rows then E' = min(E, N) perturbed training rows."""
        X = self.target.X  # type: ignore[attr-defined]
        X_batch, _ = self.target.rows(batch)  # type: ignore[attr-defined]
        n_data, n_features = X.shape
        count = min(self.options.extra_points, n_data)
        if count == 0:
            return X_batch, X_batch.shape[0]
        rows = torch.randperm(n_data, generator=self.generator)[:count]
        scale = self.options.ptb_scale / math.sqrt(n_data * n_features)
        noise = torch.randn(count, n_features, generator=self.generator, dtype=torch.float64)
        extras = X.index_select(0, rows.to(X.device)) + (scale * noise).to(device=X.device, dtype=X.dtype)
        return torch.cat([X_batch, extras]), X_batch.shape[0]

    def prior_draws(self, points: Tensor) -> Tensor:
        """`prior_draws` fresh prior functions at points [P, p], float64 on the CPU: [S, P] or [S, P, K].
        The output layer's prior std is multiplied by `output_prior_scale`."""
        weights, _ = self.weight_prior.sample(self.options.prior_draws, self.generator)
        if self.options.output_prior_scale != 1.0:
            last = self.function_network.n_layers - 1
            for kind in ("weight", "bias"):
                block = self.function_network.blocks[f"layer{last}.{kind}"]
                weights[:, block.offset: block.offset + block.size] *= self.options.output_prior_scale
        outputs = self.function_network.forward(self._padded(weights), points.to(device="cpu", dtype=torch.float64))
        if self.task == "regression":
            return outputs[..., 0]
        if self.options.classification_values == "log_softmax":
            return torch.log_softmax(outputs, dim=-1)
        return outputs

    def log_likelihood(self, values: Tensor, y: Tensor, scale: float, log_std: Tensor | None) -> Tensor:
        """scale·Σ_b log p(y_b | f_b) per particle [n], values at the B training columns."""
        if self.task == "regression":
            return scale * gaussian_log_likelihood_sum(y - values, log_std)
        log_probs = torch.log_softmax(values, dim=-1)
        return scale * log_probs.gather(-1, y.expand(values.shape[0], -1).unsqueeze(-1)).squeeze(-1).sum(-1)

    def function_score(self, values: Tensor, points: Tensor, n_train: int, y: Tensor, scale: float,
                       log_std: Tensor | None) -> Tensor:
        """∇_F [N·mean_b log p(y_b | f_b, σ) + log p̃(f at the prior columns)], the shape of values. Counts one
        target evaluation (`grad_evals`) per function: with the VJP, a network forward and backward each."""
        record_evaluations(self.target, values.shape[0])
        with torch.enable_grad():
            leaf = values.detach().requires_grad_(True)
            (score,) = torch.autograd.grad(self.log_likelihood(leaf[:, :n_train], y, scale, log_std).sum(), leaf)
        columns = prior_columns(values.shape[1], self.options.prior_points)
        draws = self.prior_draws(points.index_select(0, columns.to(points.device)))
        mean, precision = fit_gaussian(draws.reshape(draws.shape[0], -1), self.options.eigen_floor)
        at_columns = values.index_select(1, columns.to(values.device))
        prior = gaussian_score(at_columns.reshape(values.shape[0], -1).cpu(), mean, precision)
        score[:, columns.to(score.device)] += prior.reshape(at_columns.shape).to(score)
        return score

    def kernel(self, values: Tensor) -> tuple[Kernel, float]:
        """The kernel on flattened function values [n, M·K], with the floored, constant bandwidth."""
        h = self.bandwidth_rule(values).clamp_min(self.options.bandwidth_floor)
        return kernel_from_options(self.options.kernel, h), float(h)

    def noise_log_prior(self, std: Tensor) -> Tensor:
        """log prior of σ (no softplus Jacobian, as the code's MAP): InverseGamma(α, β) on σ, or
        Gamma(a0, rate b0) on the precision σ⁻²; constants dropped."""
        if isinstance(self.noise_model, InverseGammaNoiseStd):
            return -(self.noise_model.alpha + 1) * std.log() - self.noise_model.beta / std
        precision = std.pow(-2)
        return (self.noise_model.a0 - 1) * precision.log() - self.noise_model.b0 * precision  # type: ignore[union-attr]

    def function_direction(self, values: Tensor, points: Tensor, n_train: int, y: Tensor, scale: float,
                           log_std: Tensor | None, **direction_kw: Any) -> tuple[Tensor, float]:
        """(v, h): the POVI direction v on the function values [n, M] (or [n, M, K], no graph) at the mixed batch
        `points` (its first n_train rows the training rows, with targets y), flattened per particle, with the
        score of `function_score` and the kernel of `kernel` (Algorithm 1, lines 5-6); v has the shape of the
        values. Draws the prior functions from `generator`."""
        score = self.function_score(values, points, n_train, y, scale, log_std)
        flat = values.reshape(values.shape[0], -1)
        kernel, h = self.kernel(flat)
        kw = {"backend": self.options.kernel.backend, "precision": self.options.kernel.precision, **direction_kw}
        direction = type(self).povi_direction(flat, score.reshape(flat.shape), kernel, **kw).reshape(values.shape)
        return direction, h


class FunctionSpacePOVI(FunctionSpaceDirection, Method):
    """Base of the f-POVI methods; subclasses set `povi_direction(x, score, kernel, **kw) -> [n, d]`."""

    name = "function_space_povi"
    options: FunctionSpacePOVIOptions
    povi_direction: Direction = staticmethod(svgd_direction)
    #: rows [start, stop) of `povi_direction` against all n (the ranked step, `_ranked_step`)
    povi_direction_rows: Direction = staticmethod(svgd_direction_rows)
    rank_sharing = "networks"

    def __init__(self, target: Target, options: FunctionSpacePOVIOptions, num_particles: int, seed: int,
                 device: torch.device):
        super().__init__(target, options, num_particles, seed, device)
        self.init_function_space(target)
        self.network: MLP = self.function_network

        if options.init == "fpovi":
            start = fpovi_initial_weights(self.network, num_particles, seed)
        else:
            generator = torch.Generator()
            rows = []
            for i in range(num_particles):
                generator.manual_seed(derive_seed(seed, 2, i))
                rows.append(target.initial_particles(1, generator)[0, : self.network.n_weights])  # type: ignore[attr-defined]
            start = torch.stack(rows)
        self.weights = start.to(device=device, dtype=self.dtype).requires_grad_(True)
        self.optimizer = build_optimizer([self.weights], options.optimizer)
        # σ_i = softplus(raw_i); a fixed-noise target keeps its σ (no raw parameter is moved).
        raw = inverse_softplus(options.noise_init if self.noise_learned else self.fixed_noise_std)
        self.std_raw = torch.full((num_particles,), raw, dtype=self.dtype, device=device, requires_grad=True)
        self.noise_optimizer = build_optimizer([self.std_raw], options.noise_optimizer)
        self.generator = torch.Generator(device="cpu")
        self.generator.manual_seed(derive_seed(seed, 1))

    # ---- the pull-back ---------------------------------------------------------------------------------

    def vjp(self, values: Tensor, direction: Tensor) -> Tensor:
        """(∂f(x; θ_i)/∂θ_i)ᵀ v_i for every particle, [n, n_weights]: function values [n, M] (or [n, M, K]) with
        their graph to the weights, and a function-space direction v of the same shape (paper eq. 4). One
        VJP through the batched network."""
        return self.function_vjp(values, self.weights, direction)

    def pullback(self, points: Tensor, direction: Tensor) -> None:
        """The weight update of eq. 4 (`Method.pullback` for function-space methods): `points` are the function
        values f(x; θ_i) at the mixed batch with their graph to the weights, `direction` the ascent direction v
        on them. `mse` (the TF1 code): Adam on ∇_θ mean((stopgrad(f + v) − f)²) = −(2/(n·M·K)) Jᵀv;
        `vjp` (tf2 branch): on −Jᵀv."""
        check_direction(direction, self.step_count + 1)
        grad = self.vjp(points, direction)
        if self.options.pullback == "mse":
            grad = grad * (2.0 / points.numel())
        self.optimizer.zero_grad(set_to_none=False)
        self.weights.grad = -grad
        self.optimizer.step()

    # ---- step ------------------------------------------------------------------------------------------

    def step(self) -> dict[str, float]:
        if self.ranks.world_size > 1:
            return self._ranked_step()
        started = time.perf_counter()
        batch = self.target.sample_batch(self.generator)
        _, y = self.target.rows(batch)  # type: ignore[attr-defined]
        scale = self.target.likelihood_scale(batch)  # type: ignore[attr-defined]
        points, n_train = self.mixed_batch(batch)
        with torch.enable_grad():
            outputs = self.function_values(self.weights, points)
        values = outputs.detach()
        log_std = F.softplus(self.std_raw.detach()).log() if self.task == "regression" else None
        direction, h = self.function_direction(values, points, n_train, y, scale, log_std)
        self.pullback(outputs, direction)

        info: dict[str, float] = {}
        if self.noise_learned:
            info["noise_std"] = self._noise_step(values[:, :n_train], y, scale)
        elif self.task == "regression":
            info["noise_std"] = self.fixed_noise_std
        self.step_count += 1
        force = float(direction.reshape(direction.shape[0], -1).square().sum(-1).mean().sqrt())
        return {"step_time_s": time.perf_counter() - started, "bandwidth": h, "function_force_norm": force, **info}

    def _ranked_step(self) -> dict[str, float]:
        """`step` with the networks shared by the ranks (`rank_sharing` "networks", `inference_core.distributed`).
        Every rank holds all n weight vectors, σ's and optimiser states, identical on every rank; it draws the same
        minibatch, mixed batch and prior functions (the generator's state is the same everywhere), evaluates the
        function values and their score (lines 4-5 of Algorithm 1) for its own networks [lo, hi) only, all-gathers
        values and scores (one collective), and computes the POVI direction v for its own rows against all n
        (`povi_direction_rows`, the bandwidth from all n as on one rank) and its own rows' pull-back (∂F/∂θ_i)ᵀ v_i
        (eq. 4). The rows' gradients and directions are all-gathered (one collective) and the same weight step, and
        the same σ step on the gathered values, are taken on every rank. Same update as `step` up to the order of
        the kernel sums' additions."""
        started = time.perf_counter()
        group = self.ranks
        n = self.num_particles
        lo, hi = group.bounds(n)
        batch = self.target.sample_batch(self.generator)
        _, y = self.target.rows(batch)  # type: ignore[attr-defined]
        scale = self.target.likelihood_scale(batch)  # type: ignore[attr-defined]
        points, n_train = self.mixed_batch(batch)
        own = self.weights.detach()[lo:hi].requires_grad_(True)
        with torch.enable_grad():
            outputs = self.function_values(own, points)
        values_own = outputs.detach()
        shape = values_own.shape[1:]
        width = values_own[0].numel()
        log_std = F.softplus(self.std_raw.detach()).log() if self.task == "regression" else None
        own_log_std = None if log_std is None else log_std[lo:hi]
        score_own = self.function_score(values_own, points, n_train, y, scale, own_log_std)
        joined = group.all_gather_rows(torch.cat([values_own.reshape(hi - lo, width),
                                                  score_own.reshape(hi - lo, width)], dim=1), n)
        flat, score = joined[:, :width].contiguous(), joined[:, width:].contiguous()
        kernel, h = self.kernel(flat)
        kw = {"backend": self.options.kernel.backend, "precision": self.options.kernel.precision}
        direction_own = type(self).povi_direction_rows(
            flat, score, kernel, lo, hi, gather=lambda rows: group.all_gather_rows(rows, n), **kw)
        grad_own = self.function_vjp(outputs, own, direction_own.reshape(values_own.shape))
        joined = group.all_gather_rows(torch.cat([grad_own, direction_own.to(grad_own.dtype)], dim=1), n)
        grad, direction = joined[:, : grad_own.shape[1]], joined[:, grad_own.shape[1]:]
        check_direction(direction, self.step_count + 1)
        if self.options.pullback == "mse":
            grad = grad * (2.0 / (n * width))
        self.optimizer.zero_grad(set_to_none=False)
        self.weights.grad = -grad
        self.optimizer.step()

        info: dict[str, float] = {}
        if self.noise_learned:
            info["noise_std"] = self._noise_step(flat.reshape(n, *shape)[:, :n_train], y, scale)
        elif self.task == "regression":
            info["noise_std"] = self.fixed_noise_std
        self.step_count += 1
        force = float(direction.square().sum(-1).mean().sqrt())
        return {"step_time_s": time.perf_counter() - started, "bandwidth": h, "function_force_norm": force, **info}

    def _noise_step(self, values: Tensor, y: Tensor, scale: float) -> float:
        """One MAP step on raw σ: minimise −Σ_i [N·mean_b log N(y_b; f_ib, σ_i²) + log prior(σ_i)]."""
        with torch.enable_grad():
            std = F.softplus(self.std_raw)
            loss = -(self.log_likelihood(values, y, scale, std.log()) + self.noise_log_prior(std)).sum()
            (grad,) = torch.autograd.grad(loss, self.std_raw)
        self.noise_optimizer.zero_grad(set_to_none=False)
        self.std_raw.grad = grad
        self.noise_optimizer.step()
        return float(F.softplus(self.std_raw.detach()).mean())

    # ---- particles and checkpoints -------------------------------------------------------------------------

    def noise_std(self) -> Tensor:
        """Per-particle σ [n] (regression)."""
        return F.softplus(self.std_raw.detach())

    def particles(self) -> Tensor:
        """[n, target.dim] in the target's layout; a bnn target's noise slot holds the MAP σ
        (log_noise_std = log σ, log_noise_precision = −2 log σ)."""
        weights = self.weights.detach()
        names = getattr(self.target, "extra_names", [])
        if not names:
            return weights
        log_std = self.noise_std().log()
        extras = {"log_noise_std": log_std, "log_noise_precision": -2 * log_std}
        return torch.cat([weights] + [extras[name].unsqueeze(-1) for name in names], dim=-1)

    def state_dict(self) -> dict[str, Any]:
        return {
            "step": self.step_count,
            "weights": self.weights.detach().clone(),
            "std_raw": self.std_raw.detach().clone(),
            "optimizer": self.optimizer.state_dict(),
            "noise_optimizer": self.noise_optimizer.state_dict(),
            "generator": self.generator.get_state(),
            "bandwidth_rule": self.bandwidth_rule.state_dict(),
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        with torch.no_grad():
            self.weights.copy_(state["weights"].to(self.weights))
            self.std_raw.copy_(state["std_raw"].to(self.std_raw))
        self.optimizer.load_state_dict(state["optimizer"])
        self.noise_optimizer.load_state_dict(state["noise_optimizer"])
        self.generator.set_state(state["generator"])
        self.bandwidth_rule.load_state_dict(state.get("bandwidth_rule", {}))
        self.step_count = int(state["step"])


class FSVGD(FunctionSpacePOVI):
    """f-SVGD: v = (1/n) Σ_j [k(F_j, F_i) ∇log p(F_j) + ∇_{F_j} k(F_j, F_i)] (Table 1, SVGD row)."""

    name = "fsvgd"
    povi_direction = staticmethod(svgd_direction)
    povi_direction_rows = staticmethod(svgd_direction_rows)


class FWSGLD(FunctionSpacePOVI):
    """f-w-SGLD-B: the blob w-SGLD direction (Table 1; no 1/n, stop-gradient row sums) on function values."""

    name = "fwsgld"
    povi_direction = staticmethod(wsgld_direction)
    povi_direction_rows = staticmethod(wsgld_direction_rows)


class FPiSGLD(FunctionSpacePOVI):
    """f-pi-SGLD: (w-SGLD-B + SVGD)/2 on function values (Table 1)."""

    name = "fpisgld"
    povi_direction = staticmethod(pisgld_direction)
    povi_direction_rows = staticmethod(pisgld_direction_rows)
