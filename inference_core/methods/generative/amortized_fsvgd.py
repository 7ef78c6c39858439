"""`amortized_fsvgd`: a generator (hypernetwork) of Bayesian-neural-network weights trained with f-SVGD's
function-space direction (f-POVI, Wang, Ren, Zhu & Zhang 2019, eq. 4 / Algorithm 1), pulled back through the
network and then through the generator (GPVI paper, Ratzlaff et al. 2021, eq. 14).

Targets: those of `fsvgd` (`bnn` with a fixed weight prior, `function_posterior` with a `bnn` prior). The
generator f_θ(z) = g(z[:k]) + λz (`GenerativeMethod`) outputs points in the target's layout: the network's
weights W, then (a `bnn` regression with a learnt noise) the noise coordinate s (log σ or log σ⁻²). Each step,
in this order of draws from the method's RNG:

1. noise z [n, noise_dim], x = f_θ(z) with its graph to θ, W = x[:, :n_weights];
2. the target's minibatch, then f-SVGD's mixed batch (B training rows plus E perturbed rows, Algorithm 1
   line 4) and function values F = f(mixed batch; W_i), [n, M] (classification: [n, M, K]);
3. v = f-SVGD's direction on the flattened F (`FunctionSpaceDirection.function_direction`: N·mean likelihood
   score with each draw's σ_i, the Gaussian prior fitted to fresh prior functions, the full-matrix median RBF
   kernel; lines 5-6): the same code as `fsvgd`, which draws the prior functions here;
4. φ_W = (∂F/∂W)ᵀ v, the VJP through the network (eq. 4), [n, n_weights];
5. noise (regression with a learnt noise), carried in the target's slot of every draw as GPVI's BNN samplers do
   (`/predict` reads it there), starting at σ = `noise_init` (the slot's output row zeroed, its bias set). With
   `noise_holdout` (default 0.1; methods.holdout) the minibatches come from the rows not held out, and one σ
   shared by the draws takes an Adam step on the held-out rows' predictive log-likelihood plus the noise prior
   (`_shared_noise_step`), written into the slot's bias after the generator's step; with `noise_holdout: 0`
   each draw's σ_i is fsvgd's per-particle MAP σ, amortised: its coordinate s_i moves along
   ∂/∂s_i [N·mean_b log N(y_b; F_ib, σ_i²) + log p(σ_i)] at the same (pre-update) function values, with fsvgd's
   noise prior (`noise_log_prior`, no Jacobian term). A fixed noise is the target's, as in `fsvgd`;
6. φ = [φ_W, φ_s] is handed to `GenerativeMethod.pullback`: the generator's optimiser descends
   −(1/n) Σ_i φ_i·f_θ(z_i), i.e. φ pulled back through the generator (GPVI eq. 14). No `mse` 1/(n·M·K) factor
   (fsvgd's `pullback: "mse"`): φ_W is fsvgd's `vjp` form, whose scale Adam removes.

The stored sampler is `GenerativeMethod.sampler()`: the generator with the target's layout and predictive model.

As k ranks (`rank_sharing` "batch", inference_core.distributed): every rank draws the whole noise batch,
minibatch, mixed batch and prior functions (the same draws as one rank), and forms its own draws' rows [lo, hi):
f_θ(z_i), their function values and scores (steps 1-2 and the score of step 3), all-gathered in one collective;
the kernel and bandwidth come from all n, and each rank computes v for its own rows against all n
(`svgd_direction_rows`), its rows' VJP (step 4) and noise direction, and pulls them back (`ranked_pullback`: the
generator's gradients all-reduced). The shared σ's held-out step reads every draw's values at the held-out rows:
each rank forms its own draws', gathered, and takes the same step.
"""

from __future__ import annotations

import math
from typing import Any

import torch
from torch import Tensor

from inference_core.methods.directions import svgd_direction, svgd_direction_rows
from inference_core.methods.function_space.fpovi import FunctionSpaceDirection
from inference_core.methods.generative.base import STREAM_FIRST_BATCH, GenerativeMethod
from inference_core.methods.holdout import (
    SELECTION_DRAWS,
    SELECTION_STREAM,
    HoldoutSelection,
    fit_batch,
    holdout_split,
    predictive_log_likelihood,
)
from inference_core.methods.optim import make_optimizer
from inference_core.samplers import Sampler
from inference_core.schemas.generative import AmortizedFSVGDOptions
from inference_core.schemas.methods import OptimizerOptions
from inference_core.seeding import derive_seed
from inference_core.targets.base import Target
from inference_core.targets.counting import record_evaluations

#: Adam lr of the shared, held-out-calibrated log σ
SHARED_NOISE_LR = 1e-2


class AmortizedFSVGD(FunctionSpaceDirection, GenerativeMethod):
    """f-SVGD's function-space direction (f-POVI eq. 4, Algorithm 1), pulled back through the network and the
    generator (GPVI eq. 14). See the module docstring."""

    name = "amortized_fsvgd"
    options: AmortizedFSVGDOptions
    povi_direction = staticmethod(svgd_direction)
    rank_sharing = "batch"

    def __init__(self, target: Target, options: AmortizedFSVGDOptions, num_particles: int, seed: int,
                 device: torch.device):
        self.options = options
        self.init_function_space(target)  # refuses other targets before the generator is built
        super().__init__(target, options, num_particles, seed, device)
        self.n_weights = self.function_network.n_weights
        names = list(getattr(target, "extra_names", []))
        #: (column, name) of the learnt noise coordinate in the target's layout, or None
        self.noise_slot: tuple[int, str] | None = None
        if self.noise_learned:
            name = "log_noise_std" if "log_noise_std" in names else "log_noise_precision"
            self.noise_slot = (self.n_weights + names.index(name), name)
            self._start_noise_at(options.noise_init, seed)
        #: rows the weights' likelihood sees and rows σ is calibrated on (methods.holdout), or None
        self.fit_rows, self.holdout_rows = (None, None) if self.noise_slot is None else holdout_split(
            int(target.n_data), options.noise_holdout, seed, device)
        #: with held-out rows, one σ shared by every draw (the slot's output row stays zero, its bias is σ's slot
        #: value), fitted to the held-out rows' predictive log-likelihood: a per-draw σ fitted there would also
        #: absorb its draw's spread around the others, which the predictive mixture counts once more
        self.shared_log_std = None if self.holdout_rows is None else torch.tensor(
            math.log(options.noise_init), dtype=self.dtype, device=device, requires_grad=True)
        self.noise_optimizer = None if self.shared_log_std is None else make_optimizer(
            [self.shared_log_std], OptimizerOptions(name="adam", lr=SHARED_NOISE_LR))
        #: early stopping on the held-out rows (`holdout_selection_every`; methods.holdout.HoldoutSelection)
        self.selection = HoldoutSelection(options.holdout_selection_every if self.shared_log_std is not None else 0)

    @property
    def generator(self) -> torch.Generator:  # type: ignore[override]
        """The RNG `FunctionSpaceDirection` draws the extras and the prior functions from: the method's own."""
        return self.rng

    def _start_noise_at(self, std: float, seed: int) -> None:
        """Every draw's noise coordinate = the slot value of σ = std (as fsvgd's σ_i = noise_init)."""
        column, name = self.noise_slot  # type: ignore[misc]
        value = math.log(std) if name == "log_noise_std" else -2 * math.log(std)
        with torch.no_grad():
            self.network.output.weight[column].zero_()
            self.network.output.bias[column] = value
            first = torch.Generator().manual_seed(derive_seed(seed, STREAM_FIRST_BATCH))
            self.last_batch = self.network(self.noise(self.num_particles, first)).detach()

    # ---- σ in the target's slot ----------------------------------------------------------------------------

    def log_std_of(self, slot: Tensor) -> Tensor:
        """log σ from the noise coordinate s: s (log_noise_std) or −s/2 (log_noise_precision)."""
        return slot if self.noise_slot[1] == "log_noise_std" else -0.5 * slot  # type: ignore[index]

    def draw_log_std(self, x: Tensor) -> Tensor | None:
        """log σ_i [n] of the generated draws x (regression; a fixed noise for every draw), else None."""
        if self.task != "regression":
            return None
        if self.noise_slot is None:
            return torch.full((x.shape[0],), math.log(self.fixed_noise_std), dtype=x.dtype, device=x.device)
        return self.log_std_of(x[:, self.noise_slot[0]])

    def noise_direction(self, slot: Tensor, values: Tensor, y: Tensor, scale: float) -> Tensor:
        """∂/∂s_i [scale·Σ_b log N(y_b; F_ib, σ_i²) + log p(σ_i)] per draw [n], σ_i from the slot s_i: the
        gradient of fsvgd's MAP noise objective (`_noise_step`), values at the B training columns."""
        with torch.enable_grad():
            leaf = slot.detach().requires_grad_(True)
            log_std = self.log_std_of(leaf)
            objective = self.log_likelihood(values, y, scale, log_std) + self.noise_log_prior(log_std.exp())
            (grad,) = torch.autograd.grad(objective.sum(), leaf)
        return grad

    # ---- one step --------------------------------------------------------------------------------------------

    def weight_direction(self, x: Tensor, batch: Tensor | None,
                         rows: tuple[int, int] | None = None) -> tuple[Tensor, dict[str, float], Tensor]:
        """(φ, info, Σ_i |v_i|²) at the generated draws x (no graph needed): f-SVGD's direction on their function
        values at a fresh mixed batch, pulled back through the network (φ_W), and the noise coordinate's MAP
        gradient. One rank: x all n draws [n, d]. `rows` (lo, hi) under k ranks: x this rank's draws [lo, hi) of the
        n, whose values and scores are gathered (`_gathered_direction`); φ and the sum are for these rows, and
        `function_force_norm` is left to the caller (it needs every rank's sum)."""
        _, y = self.target.rows(batch)  # type: ignore[attr-defined]
        scale = self.target.likelihood_scale(batch)  # type: ignore[attr-defined]
        points, n_train = self.mixed_batch(batch)
        weights = x.detach()[:, : self.n_weights].requires_grad_(True)
        with torch.enable_grad():
            outputs = self.function_values(weights, points)
        values = outputs.detach()
        log_std = self.draw_log_std(x.detach())
        if rows is None:
            v, h = self.function_direction(values, points, n_train, y, scale, log_std,
                                           entropy_weight=self.options.entropy_weight)
        else:
            v, h = self._gathered_direction(values, points, n_train, y, scale, log_std, rows)
        phi = torch.zeros_like(x.detach())
        phi[:, : self.n_weights] = self.function_vjp(outputs, weights, v)
        force_sq = v.reshape(v.shape[0], -1).square().sum()
        info = {"bandwidth": h}
        if rows is None:
            info["function_force_norm"] = float((force_sq / v.shape[0]).sqrt())
        if self.shared_log_std is not None:
            info["holdout_log_likelihood"] = self._shared_noise_step(weights, gather=rows is not None)
            info["noise_std"] = float(self.shared_log_std.detach().exp())
        elif self.noise_slot is not None:
            column = self.noise_slot[0]
            phi[:, column] = self.noise_direction(x.detach()[:, column], values[:, :n_train], y, scale)
            info["noise_std"] = float(log_std.exp().mean())  # type: ignore[union-attr]
        elif self.task == "regression":
            info["noise_std"] = self.fixed_noise_std
        return phi, info, force_sq

    def _gathered_direction(self, values: Tensor, points: Tensor, n_train: int, y: Tensor, scale: float,
                            log_std: Tensor | None, rows: tuple[int, int]) -> tuple[Tensor, float]:
        """`function_direction` for this rank's draws [lo, hi) (values [hi − lo, M(, K)]): their scores here (the
        prior functions drawn as on one rank), values and scores all-gathered, the kernel and bandwidth from all n,
        v for the own rows against all n (f-POVI eq. 4 with SVGD's direction, `svgd_direction_rows`)."""
        group, n = self.ranks, self.num_particles
        lo, hi = rows
        score_own = self.function_score(values, points, n_train, y, scale, log_std)
        width = values[0].numel()
        joined = group.all_gather_rows(torch.cat([values.reshape(hi - lo, width), score_own.reshape(hi - lo, width)],
                                                 dim=1), n)
        flat, score = joined[:, :width].contiguous(), joined[:, width:].contiguous()
        kernel, h = self.kernel(flat)
        v_own = svgd_direction_rows(flat, score, kernel, lo, hi, entropy_weight=self.options.entropy_weight,
                                    backend=self.options.kernel.backend, precision=self.options.kernel.precision)
        return v_own.reshape(values.shape), h

    def _shared_noise_step(self, weights: Tensor, gather: bool = False) -> float:
        """One Adam step of the shared log σ on −[(N/|H|) Σ_{j∈H} log (1/n) Σ_i N(y_j; f_i(x_j), σ²) + log p(σ)],
        the draws' functions f_i at the held-out rows H (no graph to the generator); `train_step` writes the new σ
        into the slot once the generator's step no longer needs its graph. Returns the held-out log-likelihood per
        row."""
        X, y = self.target.rows(self.holdout_rows)  # type: ignore[attr-defined]
        with torch.no_grad():
            f = self.function_values(weights.detach(), X)
        if gather:  # this rank's draws: every draw's values, for the same step on every rank
            f = self.ranks.all_gather_rows(f, self.num_particles)
        with torch.enable_grad():
            log_std = self.shared_log_std
            per_row = predictive_log_likelihood(f, y, log_std)
            scale = self.target.likelihood_scale(self.holdout_rows)  # type: ignore[attr-defined]
            loss = -(scale * per_row.sum() + self.noise_log_prior(log_std.exp()))
            (grad,) = torch.autograd.grad(loss, log_std)
        self.noise_optimizer.zero_grad(set_to_none=False)  # type: ignore[union-attr]
        log_std.grad = grad
        self.noise_optimizer.step()  # type: ignore[union-attr]
        return float(per_row.detach().mean())

    def _write_shared_noise(self) -> None:
        column, name = self.noise_slot  # type: ignore[misc]
        value = self.shared_log_std.detach() if name == "log_noise_std" else -2 * self.shared_log_std.detach()
        with torch.no_grad():
            self.network.output.weight[column].zero_()
            self.network.output.bias[column] = value

    def ranked_rows(self) -> tuple[int, ...]:
        return (self.num_particles,)

    def train_step(self) -> dict[str, float]:
        z = self.noise(self.num_particles)
        batch = self.target.sample_batch(self.rng) if self.fit_rows is None else fit_batch(
            self.fit_rows, self.target.batch_size, self.rng)  # type: ignore[attr-defined]
        n = self.num_particles
        if self.ranks.world_size > 1:
            lo, hi = self.ranks.bounds(n)
            x = self.network(z[lo:hi])
            phi, info, force_sq = self.weight_direction(x, batch, rows=(lo, hi))
            phi2, force2 = self.ranked_pullback(x, phi, [phi.square().sum(), force_sq])
            info["function_force_norm"] = (force2 / n) ** 0.5
            norm = (phi2 / n) ** 0.5
        else:
            x = self.network(z)
            phi, info, _ = self.weight_direction(x, batch)
            self.pullback(x, phi)
            norm = float(phi.square().sum(-1).mean().sqrt())
        if self.shared_log_std is not None:
            self._write_shared_noise()
        return {**info, "direction_norm": norm}

    def step(self) -> dict[str, float]:
        metrics = super().step()
        if self.selection.due(self.step_count):
            rows = self._selection_rows()
            record_evaluations(self.target, SELECTION_DRAWS)  # the check's held-out likelihoods, no gradient
            self.selection.offer(self.step_count, rows, self._live_state(fresh_batch=True))
            metrics["holdout_score"] = float(rows.mean())
        return metrics

    # ---- early stopping on the held-out rows ---------------------------------------------------------------

    def _selection_rows(self) -> Tensor:
        """The held-out rows' predictive log-likelihoods [m] (model units) under SELECTION_DRAWS draws of the
        generator from a fixed stream (the same at every check; the run's RNG is not touched) and the shared σ."""
        g = torch.Generator().manual_seed(derive_seed(self.seed, SELECTION_STREAM))
        X, y = self.target.rows(self.holdout_rows)  # type: ignore[attr-defined]
        with torch.no_grad():
            weights = self.network(self.noise(SELECTION_DRAWS, g))[:, : self.n_weights]
            f = self.function_values(weights, X)
            return predictive_log_likelihood(f, y, self.shared_log_std.detach()).double()  # type: ignore[union-attr]

    def _live_state(self, fresh_batch: bool = False) -> dict[str, Tensor]:
        """What the results are read from: the generator's tensors, the shared σ and the batch behind
        `particles()` (the live tensors themselves). `fresh_batch`: that batch drawn anew from the generator as it
        is now (a fixed stream), for the state `HoldoutSelection.offer` keeps: the live batch is the one the last
        step updated the generator at, one step behind it."""
        batch = self.last_batch
        if fresh_batch:
            g = torch.Generator().manual_seed(derive_seed(self.seed, SELECTION_STREAM, 1))
            with torch.no_grad():
                batch = self.network(self.noise(self.num_particles, g)).detach()
        return {**{f"generator.{name}": t for name, t in self.network.state_dict(keep_vars=True).items()},
                "shared_log_std": self.shared_log_std, "last_batch": batch}  # type: ignore[dict-item]

    def _selected(self):
        """Context in which the live tensors hold the selected state where it replaces the final one (yields
        whether it does; `HoldoutSelection.applied`)."""
        return self.selection.readout(self._live_state, self._selection_rows)

    def particles(self) -> Tensor:
        with self._selected():
            return super().particles().clone()

    def sampler(self) -> Sampler:
        with self._selected():  # the sampler copies the generator's tensors
            return super().sampler()

    def summary_metrics(self) -> dict[str, float]:
        """`selected_step`: the step of the run the results come from (the last one unless the selection replaced
        it), where the selection is on."""
        if not self.selection.every:
            return {}
        with self._selected() as replaced:
            return {"selected_step": float(self.selection.step if replaced else self.step_count)}

    # ---- checkpoints ---------------------------------------------------------------------------------------

    def extra_state(self) -> dict[str, Any]:
        state: dict[str, Any] = {"bandwidth_rule": self.bandwidth_rule.state_dict()}
        if self.shared_log_std is not None:
            state.update(shared_log_std=self.shared_log_std.detach().clone(),
                         noise_optimizer=self.noise_optimizer.state_dict(),  # type: ignore[union-attr]
                         selection=self.selection.state_dict())
        return state

    def load_extra_state(self, state: dict[str, Any]) -> None:
        self.bandwidth_rule.load_state_dict(state.get("bandwidth_rule", {}))
        if self.shared_log_std is not None:
            with torch.no_grad():
                self.shared_log_std.copy_(state["shared_log_std"])
            self.noise_optimizer.load_state_dict(state["noise_optimizer"])  # type: ignore[union-attr]
            if "selection" in state:  # checkpoints written before `holdout_selection_every` hold none
                self.selection.load_state_dict(state["selection"])
