"""`nuts` and `hmc`: reference sampling through Pyro's kernels (`pyro.infer.mcmc.NUTS` / `HMC`, pyro-ppl
1.9.2), never a sampler of our own. NUTS: Hoffman & Gelman 2014 (Algorithm 6, with Pyro's multinomial
trajectory sampling, Betancourt 2017 §A.3.2); HMC: Neal 2011 (leapfrog + Metropolis correction, eqs. 5.18-5.20).
Warm-up: dual-averaging step size (Hoffman & Gelman 2014 §3.2, eqs. 5-6) and Stan's windowed mass-matrix
adaptation, both Pyro's (`WarmupAdapter`).

Driven transition by transition: each chain has its own kernel (`kernel.setup(warmup_steps)` once, then
`kernel.sample(params)` once per step), its own position and its own random state. One `step()` advances every
chain by one transition. The potential is U(θ) = −log p(θ) of the target on the FULL data (batch None: a
minibatch would break detailed balance); positions live on the CPU in float64 and are moved to the target's
device/dtype inside the potential, so every Pyro tensor, and every random draw, is on the CPU.

Random numbers: Pyro draws momenta, directions and acceptance uniforms from torch's global CPU generator. Each
chain's transition runs inside `torch.random.fork_rng` with the global state set to the chain's own state, which
is saved afterwards; the caller's global state is left as it was.

Draws: transitions after `warmup_steps` are kept, at most `max_draws_per_chain` per chain (when full, every other
stored draw is dropped and the stride doubles, so the store is always an evenly thinned record of the whole
post-warm-up run). `particles()`: before any kept draw, the chains' current positions [chains, d]; afterwards
every stored draw, interleaved across chains (`draws_returned: "all"`, the default), or up to `num_particles` draws
evenly spaced over each chain's record, interleaved likewise (`"num_particles"`).

Diagnostics (`diagnostics()`, and in the step metrics every `diagnostics_every` steps): bulk ESS (Vehtari et al.
2021, §4.3: rank-normalised split chains, then `pyro.ops.stats.effective_sample_size`, Geyer's initial monotone
sequence, with Stan's bound ESS ≤ S·log10 S that Pyro lacks), the same ESS on the raw draws, and Pyro's
`split_gelman_rubin` R-hat (Gelman et al. BDA3 eq. 11.4 on split chains); min over dimensions for ESS, max for R-hat.

Checkpoints hold everything a transition reads: each chain's position, cached potential energy and gradient, its
random state, Pyro's counters (t, acceptance), divergences, the adapted step size, the dual-averaging state, the
(inverse) mass matrix and the Welford accumulator of the current window, and the draws. A fresh kernel is set up
and then overwritten with those values. This writes Pyro 1.9.2's private attributes (the version is pinned);
resuming is tested to be bit-identical to an uninterrupted run, during warm-up and after it.
"""

from __future__ import annotations

import math
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import torch
from pyro.infer.mcmc import HMC, NUTS
from pyro.ops.stats import effective_sample_size, split_gelman_rubin
from torch import Tensor

from inference_core import errors
from inference_core.methods.base import Method, initial_particles
from inference_core.methods.baselines.common import require_log_density
from inference_core.schemas.baselines import HMCOptions, MCMCOptions, NUTSOptions
from inference_core.seeding import derive_seed
from inference_core.targets.base import Target

SITE = "x"  # the one Pyro sample site: the whole parameter vector
FULL_MASS_MAX_DIM = 2000
STREAM_CHAIN_RNG = 40  # chain c's random state: derive_seed(seed, STREAM_CHAIN_RNG, c)


# ---- diagnostics ---------------------------------------------------------------------------------------------


def average_ranks(values: Tensor) -> Tensor:
    """1-based ranks of every column of values [N, d] with ties given their average rank: one sort, then each run
    of equal values gets the mean of its first and last sorted positions (a MALA chain repeats its value at every
    rejection, so ties are common). Half the time of searching the sorted columns for every value (0.29 s against
    0.63 s on 25,000 × 100), and the ESS checks of `auto`'s chains spend most of theirs here."""
    n, d = values.shape
    ordered, order = values.sort(dim=0)
    position = torch.arange(n, device=values.device).unsqueeze(1).expand(n, d)
    starts = torch.ones_like(ordered, dtype=torch.bool)
    starts[1:] = ordered[1:] != ordered[:-1]
    ends = torch.ones_like(starts)
    ends[:-1] = starts[1:]
    first = torch.where(starts, position, 0).cummax(0).values
    last = torch.where(ends, position, n - 1).flip(0).cummin(0).values.flip(0)
    return torch.empty_like(values).scatter_(0, order, ((first + last).to(values.dtype) + 2) / 2)


def rank_normalise(values: Tensor) -> Tensor:
    """z = Φ⁻¹((r − 3/8) / (S + 1/4)) over all S draws pooled, per column (Vehtari et al. 2021, eq. 14)."""
    count = values.shape[0]
    fraction = (average_ranks(values) - 0.375) / (count + 0.25)
    return math.sqrt(2) * torch.special.erfinv(2 * fraction - 1)


def split_chains(draws: Tensor) -> Tensor:
    """[C, m, d] → [2C, ⌊m/2⌋, d]: the first and last halves of every chain (the middle draw of an odd m dropped)."""
    half = draws.shape[1] // 2
    return torch.cat([draws[:, :half], draws[:, draws.shape[1] - half :]], dim=0)


def capped_ess(draws: Tensor) -> Tensor:
    """ESS per dimension [d] of draws [C, m, d] (Pyro's Geyer estimate) with Stan's bound: the autocorrelation
    time τ is at least 1/log10(C·m), so ESS ≤ C·m·log10(C·m). Pyro leaves τ unbounded, and antithetic chains
    (an HMC step size that flips the sign of a coordinate each transition: ρ₁ ≈ −1) give τ ≤ 0, a negative
    or infinite ESS (measured: −18,811 for 1,000 HMC draws of a Gaussian)."""
    total = draws.shape[0] * draws.shape[1]
    ceiling = total * math.log10(total)
    ess = effective_sample_size(draws, chain_dim=0, sample_dim=1)
    return torch.where((ess < 0) | (ess > ceiling) | ess.isnan(), torch.full_like(ess, ceiling), ess)


def bulk_ess(draws: Tensor) -> Tensor:
    """Bulk ESS per dimension [d] of draws [C, m, d], m ≥ 4: the capped ESS of the rank-normalised split chains."""
    split = split_chains(draws)
    pooled = split.reshape(-1, split.shape[-1])
    return capped_ess(rank_normalise(pooled).reshape(split.shape))


def chain_diagnostics(draws: Tensor) -> dict[str, float]:
    """min bulk ESS, min ESS, max split R-hat over dimensions of draws [C, m, d] (needs m ≥ 4)."""
    draws = draws.to(torch.float64)
    return {
        "ess_bulk_min": float(bulk_ess(draws).min()),
        "ess_min": float(capped_ess(draws).min()),
        "rhat_max": float(split_gelman_rubin(draws, chain_dim=0, sample_dim=1).max()),
    }


# ---- the method ------------------------------------------------------------------------------------------------


class _Potential:
    """U(θ) = −log p(θ) on the full data, for a CPU float64 θ [d]; counts its calls (gradient evaluations)."""

    def __init__(self, target: Target, dtype: torch.dtype, device: torch.device):
        self.target, self.dtype, self.device = target, dtype, device
        self.calls = 0

    def __call__(self, params: dict[str, Tensor]) -> Tensor:
        self.calls += 1
        theta = params[SITE]
        log_p = self.target.log_prob(theta.to(device=self.device, dtype=self.dtype).unsqueeze(0), None)[0]
        return -log_p.to(device=theta.device, dtype=theta.dtype)


class MCMC(Method):
    """Base of `nuts` and `hmc`; subclasses say which Pyro kernel with which options (`make_kernel`)."""

    options: MCMCOptions

    def __init__(self, target: Target, options: MCMCOptions, num_particles: int, seed: int, device: torch.device,
                 starts: Tensor | None = None):
        """`starts` [chains, d]: where the chains start (default: `options.init`'s first `chains` particles)."""
        super().__init__(target, options, num_particles, seed, device)
        require_log_density(target, self.name, self.dtype, device)
        d = int(target.dim)
        if options.full_mass and d > FULL_MASS_MAX_DIM:
            raise errors.MethodOptionsInvalid(
                f"full_mass needs a dense {d}×{d} matrix; it is allowed up to d = {FULL_MASS_MAX_DIM}",
                loc=("options", "full_mass"))
        self.potential = _Potential(target, self.dtype, device)
        if starts is None:
            starts = initial_particles(target, options.init, options.chains, seed)
        self.positions = [starts[c].detach().to("cpu", torch.float64).clone() for c in range(options.chains)]
        self.rng_states = [torch.Generator().manual_seed(derive_seed(seed, STREAM_CHAIN_RNG, c)).get_state()
                           for c in range(options.chains)]
        self.kernels = [self._new_kernel(c) for c in range(options.chains)]
        self.draws: list[Tensor] = []  # stored draws, each [chains, d] float64
        self.stride = 1
        self.kept = 0  # post-warm-up transitions per chain

    def make_kernel(self, potential: _Potential) -> HMC:
        raise NotImplementedError

    def _new_kernel(self, c: int) -> HMC:
        kernel = self.make_kernel(self.potential)
        kernel.initial_params = {SITE: self.positions[c]}
        with self._chain_rng(c):
            kernel.setup(self.options.warmup_steps)
        return kernel

    @contextmanager
    def _chain_rng(self, c: int) -> Iterator[None]:
        """The global CPU generator set to chain c's state (saved back after), the caller's state restored."""
        with torch.random.fork_rng(devices=[]):
            torch.set_rng_state(self.rng_states[c])
            yield
            self.rng_states[c] = torch.get_rng_state()

    # ---- stepping --------------------------------------------------------------------------------------

    def step(self) -> dict[str, float]:
        started = time.perf_counter()
        calls_before = self.potential.calls
        for c, kernel in enumerate(self.kernels):
            with self._chain_rng(c):
                self.positions[c] = kernel.sample({SITE: self.positions[c]})[SITE]
            if not bool(torch.isfinite(self.positions[c]).all()):
                raise errors.Diverged(f"chain {c} left the finite region at step {self.step_count + 1}")
        self.step_count += 1
        warming_up = self.step_count <= self.options.warmup_steps
        if not warming_up:
            self._store(torch.stack(self.positions))
        chains = len(self.kernels)
        metrics = {
            "step_time_s": time.perf_counter() - started,
            "warmup": float(warming_up),
            "accept_prob": sum(k._mean_accept_prob for k in self.kernels) / chains,
            "step_size": sum(float(k.step_size) for k in self.kernels) / chains,
            "divergences": float(sum(len(k._divergences) for k in self.kernels)),
            "potential_evals": (self.potential.calls - calls_before) / chains,
            "draws_kept": float(self.kept),
        }
        if not warming_up and self.step_count % self.options.diagnostics_every == 0:
            metrics.update(self.diagnostics())
        return metrics

    def _store(self, row: Tensor) -> None:
        """Keep post-warm-up transition `kept` when it falls on the stride; thin by 2 when the store is full."""
        if self.kept % self.stride == 0:
            self.draws.append(row)
            if len(self.draws) >= self.options.max_draws_per_chain:
                self.draws = self.draws[::2]
                self.stride *= 2
        self.kept += 1

    def stored_draws(self) -> Tensor:
        """[chains, m, d] float64 (CPU): the stored post-warm-up draws."""
        if not self.draws:
            return torch.empty(len(self.kernels), 0, int(self.target.dim), dtype=torch.float64)
        return torch.stack(self.draws, dim=1)

    def diagnostics(self) -> dict[str, float]:
        """ESS (bulk and plain, min over dimensions) and split R-hat (max) of the stored draws; {} with fewer
        than 4 per chain. The run loop's evaluation reports these at the end of a job."""
        if len(self.draws) < 4:
            return {}
        values = chain_diagnostics(self.stored_draws())
        values["draws_kept"] = float(self.kept)
        return values

    # ---- outputs -------------------------------------------------------------------------------------

    def particles(self) -> Tensor:
        if not self.draws:
            out = torch.stack(self.positions)
        else:
            draws = self.stored_draws()
            chains, m, _ = draws.shape
            if self.options.draws_returned == "all":
                return draws.transpose(0, 1).reshape(-1, draws.shape[-1]).to(device=self.device, dtype=self.dtype)
            per_chain = min(m, -(-self.num_particles // chains))
            index = torch.linspace(0, m - 1, per_chain, dtype=torch.float64).round().long()
            picked = draws[:, index].transpose(0, 1).reshape(-1, draws.shape[-1])  # interleaved across chains
            out = picked[: self.num_particles]
        return out.to(device=self.device, dtype=self.dtype)

    # ---- checkpoints ---------------------------------------------------------------------------------

    def state_dict(self) -> dict[str, Any]:
        return {
            "step": self.step_count,
            "kept": self.kept,
            "stride": self.stride,
            "draws": self.stored_draws(),
            "chains": [self._chain_state(c) for c in range(len(self.kernels))],
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        if len(state["chains"]) != len(self.kernels):
            raise ValueError(f"the checkpoint has {len(state['chains'])} chains, this run {len(self.kernels)}")
        self.step_count = int(state["step"])
        self.kept = int(state["kept"])
        self.stride = int(state["stride"])
        draws = state["draws"].to(torch.float64)
        self.draws = [draws[:, i].clone() for i in range(draws.shape[1])]
        for c, chain in enumerate(state["chains"]):
            self.positions[c] = chain["position"].to(torch.float64).clone()
            self.kernels[c] = self._new_kernel(c)  # setup's own draws are discarded with its RNG state
            self.rng_states[c] = chain["rng"].clone()
            self._restore_chain(self.kernels[c], chain)

    def _chain_state(self, c: int) -> dict[str, Any]:
        kernel = self.kernels[c]
        adapter = kernel._adapter
        masses = adapter.mass_matrix_adapter
        (site_key,) = masses.inverse_mass_matrix.keys()
        dual = getattr(adapter, "_step_size_adapt_scheme", None) if adapter.adapt_step_size else None
        welford = masses._adapt_scheme.get(site_key)
        return {
            "position": self.positions[c].clone(),
            "rng": self.rng_states[c].clone(),
            "t": kernel._t,
            "accept_cnt": kernel._accept_cnt,
            "mean_accept_prob": float(kernel._mean_accept_prob),
            "divergences": [int(v) for v in kernel._divergences],
            "potential_energy": kernel._potential_energy_last.detach().clone(),
            "z_grads": kernel._z_grads_last[SITE].detach().clone(),
            "z": kernel._z_last[SITE].detach().clone(),
            "step_size": float(adapter.step_size),
            "window": int(adapter._current_window),
            "dual": None if dual is None else {
                "prox_center": float(dual.prox_center), "x_avg": float(dual._x_avg), "g_avg": float(dual._g_avg),
                "t": int(dual._t), "x_t": float(dual._x_t) if hasattr(dual, "_x_t") else None},
            "inverse_mass_matrix": masses.inverse_mass_matrix[site_key].detach().clone(),
            "welford": None if welford is None else {
                "n": int(welford.n_samples), "mean": _tensor_or_float(welford._mean), "m2": _tensor_or_float(welford._m2)},
        }

    @staticmethod
    def _restore_chain(kernel: HMC, chain: dict[str, Any]) -> None:
        kernel._t = int(chain["t"])
        kernel._accept_cnt = int(chain["accept_cnt"])
        kernel._mean_accept_prob = float(chain["mean_accept_prob"])
        kernel._divergences = [int(v) for v in chain["divergences"]]
        kernel._cache({SITE: chain["z"].to(torch.float64).clone()}, chain["potential_energy"].to(torch.float64).clone(),
                      {SITE: chain["z_grads"].to(torch.float64).clone()})
        adapter = kernel._adapter
        masses = adapter.mass_matrix_adapter
        (site_key,) = masses.inverse_mass_matrix.keys()
        # The setter recomputes the mass matrix's square roots (the same ops as when it was set) and resets
        # the window's Welford accumulator, which is restored next.
        masses.inverse_mass_matrix = {site_key: chain["inverse_mass_matrix"].to(torch.float64).clone()}
        if chain["welford"] is not None:
            welford = masses._adapt_scheme[site_key]
            welford.n_samples = int(chain["welford"]["n"])
            welford._mean = _restore_value(chain["welford"]["mean"])
            welford._m2 = _restore_value(chain["welford"]["m2"])
        adapter.step_size = float(chain["step_size"])
        adapter._current_window = int(chain["window"])
        if chain["dual"] is not None:
            dual = adapter._step_size_adapt_scheme
            dual.prox_center = float(chain["dual"]["prox_center"])
            dual._x_avg = float(chain["dual"]["x_avg"])
            dual._g_avg = float(chain["dual"]["g_avg"])
            dual._t = int(chain["dual"]["t"])
            if chain["dual"]["x_t"] is not None:
                dual._x_t = float(chain["dual"]["x_t"])


def _tensor_or_float(value: Any) -> Any:
    return value.detach().clone() if isinstance(value, Tensor) else float(value)


def _restore_value(value: Any) -> Any:
    return value.to(torch.float64).clone() if isinstance(value, Tensor) else float(value)


class NUTSMethod(MCMC):
    name = "nuts"
    options: NUTSOptions

    def make_kernel(self, potential: _Potential) -> NUTS:
        o = self.options
        return NUTS(potential_fn=potential, step_size=o.step_size, adapt_step_size=o.adapt_step_size,
                    adapt_mass_matrix=o.adapt_mass_matrix, full_mass=o.full_mass,
                    target_accept_prob=o.target_accept_prob, max_tree_depth=o.max_tree_depth)


class BoundedHMC(HMC):
    """Pyro's HMC with the number of leapfrog steps per transition fixed (`fixed_steps`) or capped
    (`max_steps`). Pyro derives it as trajectory_length / step_size from the adapted step size, and turns a
    `num_steps` argument into the length step_size × num_steps, so a step size adapted down 1000-fold (common
    at a BNN's starting point) would make every transition 1000 times longer. Only this count is changed."""

    def __init__(self, *args: Any, fixed_steps: int | None, max_steps: int, **kwargs: Any):
        super().__init__(*args, **kwargs)
        self.fixed_steps = fixed_steps
        self.max_steps = max_steps

    @property
    def num_steps(self) -> int:
        if self.fixed_steps is not None:
            return self.fixed_steps
        return min(self.max_steps, max(1, int(self.trajectory_length / self.step_size)))


class HMCMethod(MCMC):
    name = "hmc"
    options: HMCOptions

    def make_kernel(self, potential: _Potential) -> HMC:
        o = self.options
        return BoundedHMC(potential_fn=potential, step_size=o.step_size, trajectory_length=o.trajectory_length,
                          adapt_step_size=o.adapt_step_size, adapt_mass_matrix=o.adapt_mass_matrix,
                          full_mass=o.full_mass, target_accept_prob=o.target_accept_prob,
                          fixed_steps=o.num_steps, max_steps=o.max_num_steps)
