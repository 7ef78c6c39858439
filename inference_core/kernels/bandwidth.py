"""Bandwidth rules for k(x, y) = exp(-||x - y||² / h): the median heuristic at scale, fixed, scaled, running
average (docs/implementation-notes.md, "Median heuristic"). Each rule is a small callable object (as NumPyro's injected bandwidth): `rule(X) -> h`,
a detached 0-dim tensor in X's dtype and device, plus `state_dict()`/`load_state_dict()` for checkpoints.

Median convention (numpy's): the median of an even count is the mean of the two middle order statistics.
Selection: O(N) on CPU. Above 2^17 values the two order statistics are first bracketed by a window [a, b]
read off a fixed pseudo-random sample; one pass counts the values below a and gathers the window, and numpy's
introselect runs on the window only. Exact whatever the sample: the count places the order statistics in the
window, or else a wider window, or else one introselect over everything, is taken. Below 2^17 values, one
introselect. Measured at n = 1000 particles (10⁶ distances, one thread): 1.3 ms against 6.3 ms for one
introselect over all (benchmarks/svgd_step.py). One radix sort on GPUs, where `torch.kthvalue` over one long
slice is ~150× slower (measured on an H100, docs/benchmarks.md); never `torch.quantile`, which refuses more
than 2^24 elements on older torch.
"""

from __future__ import annotations

import functools
import itertools
import math
from typing import Any

import numpy as np
import torch
from torch import Tensor

from inference_core.kernels import chunked, dense
from inference_core.kernels.common import centre, check_points, resolve_memory_budget
from inference_core.schemas.kernels import EXACT_MAX_ENTRIES, BandwidthOptions

DIVISORS: tuple[str, ...] = ("log_n", "log_n_plus_1", "log_n_squared", "none")
MEDIAN_METHODS: tuple[str, ...] = ("auto", "exact", "subsample")
#: `method="auto"` is exact up to this many particles, subsampled beyond.
AUTO_EXACT_MAX_N = 4096


def divisor_value(divisor: str, n: int) -> float:
    """log n, log(n + 1), log(n²) = 2 log n, or 1 — the denominator of the median heuristic."""
    if divisor == "log_n":
        return math.log(n)
    if divisor == "log_n_plus_1":
        return math.log(n + 1)
    if divisor == "log_n_squared":
        return 2.0 * math.log(n)
    if divisor == "none":
        return 1.0
    raise ValueError(f"divisor must be one of {DIVISORS}, got {divisor!r}")


#: CPU selection over more values than this brackets the two order statistics first (`_bracket_order_stats`)
BRACKET_MIN_VALUES = 2**17
#: size of the fixed pseudo-random sample the bracket is read from
BRACKET_SAMPLE = 2**14
#: half-widths of the bracket, in standard deviations of a sample rank (√(s q(1 − q)) ≤ √s / 2): the first
#: misses with probability ~1 % per call, the second (taken then) practically never. Tuned at n = 1000 on
#: svgd's distance matrices (one thread): 2^14 and 2.5 took 1.37 ms a call, 2^15 and 3 1.56 ms, 2^13 and 2 missed
#: 47 % of the calls (the sample is fixed, so a biased one stays biased while the particles move little).
BRACKET_MARGINS = (2.5, 6.0)
#: values per pass of the bracketing selection (bounds its boolean masks at 1 MiB)
BRACKET_CHUNK = 2**20


#: the bracketing selection takes its sample from one of this many fixed position sets in turn, so that a set
#: that happens to be biased for slowly moving particles does not make every step miss
BRACKET_SAMPLE_SETS = 8
_sample_turn = itertools.count()


@functools.lru_cache(maxsize=4 * BRACKET_SAMPLE_SETS)
def _sample_positions(total: int, size: int, which: int) -> np.ndarray:
    """`size` fixed pseudo-random positions in [0, total), set `which` (seeded, sorted for locality; repeats
    allowed)."""
    positions = np.random.default_rng(which).integers(0, total, size)
    positions.sort()
    return positions


def _bracket_order_stats(flat: np.ndarray, lo: int, hi: int, margin: float) -> tuple[float, float] | None:
    """The order statistics lo ≤ hi (0-based) of `flat`, left unchanged, or None when the bracket misses them.

    The bracket [a, b] is read off a fixed sample at the ranks of lo and hi, widened by `margin` standard
    deviations of a sample rank; one pass (in chunks) counts the values below a and gathers those in [a, b];
    when the count places both order statistics inside the window, they are selected in it alone. Exact
    whatever the sample: a miss returns None.
    """
    total = flat.shape[0]
    size = BRACKET_SAMPLE
    sample = flat[_sample_positions(total, size, next(_sample_turn) % BRACKET_SAMPLE_SETS)]
    half = math.ceil(margin * math.sqrt(size) / 2)
    i, j = lo * size // total - half, -(-(hi + 1) * size // total) + half
    kth = [k for k in (i, j) if 0 <= k < size]
    if kth:
        sample.partition(kth)
    a = sample[i] if i >= 0 else -np.inf
    b = sample[j] if j < size else np.inf
    below = 0
    parts = []
    for start in range(0, total, BRACKET_CHUNK):
        chunk = flat[start : start + BRACKET_CHUNK]
        below += int(np.count_nonzero(chunk < a))
        inside = chunk >= a
        inside &= chunk <= b
        parts.append(chunk[inside])
    window = parts[0] if len(parts) == 1 else np.concatenate(parts)
    # The rest (above b, or NaN: numpy sorts NaN last, as if above b) ranks after the window, so the window's
    # order statistics are the array's from rank `below` on. A NaN bound leaves an empty window: a miss.
    if below > lo or below + window.shape[0] <= hi:
        return None
    return _introselect_pair(window, lo - below, hi - below)


def _introselect_pair(flat: np.ndarray, lo: int, hi: int) -> tuple[float, float]:
    """Order statistics lo ≤ hi ≤ lo + 1 of `flat`, partitioned in place: one introselect at `hi`; the `lo`-th
    is then the max of the left part (numpy's multi-kth partition is several times slower than this)."""
    flat.partition(hi)
    upper = float(flat[hi])
    return (upper if lo == hi else float(flat[:hi].max())), upper


def _order_stat_mean(values: Tensor, lo: int, hi: int, *, keep: bool = False) -> float | None:
    """0.5 · (v_(lo) + v_(hi)), the 0-based order statistics lo ≤ hi ≤ lo + 1 over all entries of `values`.

    `keep=False`: `values` is a scratch tensor; on CPU it may be partitioned in place (no copy, no fresh pages
    to fault in). `keep=True`: `values` is left unchanged (up to BRACKET_MIN_VALUES values are selected in a
    copy), and None is returned where that would take a larger copy (on CPU, when both brackets miss:
    practically never; the caller then selects with `keep=False`).
    """
    if values.device.type != "cpu":
        return _median_by_sort(values, lo, hi)
    if values.dtype not in (torch.float32, torch.float64):
        values, keep = values.float(), False  # a copy: scratch
    flat = values.detach().reshape(-1).numpy()
    if flat.shape[0] > BRACKET_MIN_VALUES:
        for margin in BRACKET_MARGINS:
            pair = _bracket_order_stats(flat, lo, hi, margin)
            if pair is not None:
                return 0.5 * (pair[0] + pair[1])
        if keep:
            return None
    elif keep:
        flat = flat.copy()
    below, upper = _introselect_pair(flat, lo, hi)
    return 0.5 * (below + upper)


def _select_median(values: Tensor, count: int) -> float:
    """Median (numpy convention) of the `count` smallest entries of `values` (the rest are +inf padding).

    `values` is a scratch tensor: on CPU it may be partitioned in place (no copy, no fresh pages to fault in).
    """
    return _order_stat_mean(values, (count - 1) // 2, count // 2)


def _median_by_sort(values: Tensor, lo: int, hi: int) -> float:
    """Mean of the order statistics lo and hi of `values` by one full sort: on a GPU a radix sort of 10⁸ values
    takes tens of ms, while `torch.kthvalue` over one slice that long runs in a single block (pytorch/pytorch
    #75599: 0.68 s against sort's 0.03 s for 10⁸ floats); two such calls took 1.4 s a step at n = 10⁴ particles
    on an H100, the sort 9 ms (docs/benchmarks.md). Memory: the sorted copy and its int64 indices, 3× the input's."""
    ordered = torch.sort(values.reshape(-1)).values
    pair = ordered[[lo, hi]].double().cpu()
    return 0.5 * float(pair.sum())


@functools.lru_cache(maxsize=16)
def subsample_indices(n: int, size: int, seed: int) -> Tensor:
    """The fixed subset of `size` particle indices for (n, seed): a seeded CPU permutation, sorted."""
    generator = torch.Generator().manual_seed(seed)
    return torch.randperm(n, generator=generator)[:size].sort().values


def median_sq_dist(
    X: Tensor,
    *,
    include_diagonal: bool = False,
    method: str = "auto",
    subsample_size: int = 2048,
    seed: int = 0,
    backend: str = "auto",
    memory_budget: int | None = None,
) -> float:
    """Median of the squared pairwise distances of X (a Python float, float64 arithmetic).

    `include_diagonal=False`: over the n(n-1)/2 distinct pairs. `True`: over the full n×n matrix with its
    zero diagonal (the convention of Liu & Wang's code, ALF and NumPyro). `method`: `exact`, `subsample`
    (all pairs of a fixed seeded subset of `subsample_size` particles, deterministic given `seed`), or `auto`
    (exact up to 4096 particles). `backend="dense"` forms distances by direct differences, anything else by
    the centred Gram form in row blocks (selection has no fused kernel: `triton` uses the same path).
    """
    return median_and_sq_dists(X, include_diagonal=include_diagonal, method=method, subsample_size=subsample_size,
                               seed=seed, backend=backend, memory_budget=memory_budget)[0]


def median_and_sq_dists(
    X: Tensor,
    *,
    include_diagonal: bool = False,
    method: str = "auto",
    subsample_size: int = 2048,
    seed: int = 0,
    backend: str = "auto",
    memory_budget: int | None = None,
    keep: bool = False,
) -> tuple[float, Tensor | None]:
    """`median_sq_dist`, and with `keep` the squared-distance matrix it was taken over, left intact for reuse:
    [k, k] over the k particles of X (or of its subsample) centred by their mean, exact 0 on the diagonal
    (None without `keep`, when the median is over a subsample, or in the rare case where keeping it would have
    taken a copy: `_order_stat_mean`)."""
    check_points("X", X)
    if method not in MEDIAN_METHODS:
        raise ValueError(f"method must be one of {MEDIAN_METHODS}, got {method!r}")
    if isinstance(subsample_size, bool) or not isinstance(subsample_size, int) or subsample_size < 2:
        raise ValueError(f"subsample_size must be an integer >= 2, got {subsample_size!r}")
    n = X.shape[0]
    if method == "auto":
        method = "exact" if n <= AUTO_EXACT_MAX_N else "subsample"
    with torch.no_grad():
        x = X.detach()
        if method == "subsample" and n > subsample_size:
            x = x[subsample_indices(n, subsample_size, seed).to(x.device)]
        k = x.shape[0]
        if k * k > EXACT_MAX_ENTRIES:
            raise ValueError(
                f"the exact median over {k} particles needs {k}² distances; use method='subsample' "
                "(rule 'median_subsampled') for this many particles"
            )
        if k < 2 and not include_diagonal:
            return 0.0, None
        xc, _ = centre(x)
        budget = resolve_memory_budget(memory_budget)
        dist = dense.sq_dists(xc, xc, budget) if backend == "dense" else chunked.sq_dists(xc, xc, True, budget)
        # Sorted, the n×n matrix is its k zeros of the diagonal and then the k(k-1) off-diagonal entries
        # (each distinct pair twice, all ≥ 0): the median of the off-diagonal entries (= that of the distinct
        # pairs) is the mean of the full matrix's order statistics k + (k(k-1) - 1) // 2 and k + k(k-1) // 2.
        count, offset = (k * k, 0) if include_diagonal else (k * (k - 1), k)
        lo, hi = offset + (count - 1) // 2, offset + count // 2
        if keep and k == n:
            median = _order_stat_mean(dist, lo, hi, keep=True)
            if median is not None:
                return median, dist
        return _order_stat_mean(dist, lo, hi), None


def bandwidth_value(median: float, divisor: str, n: int) -> float:
    """THE median rule of every method: h = median / divisor(n), or 1 when the median is 0 (all points
    equal), not finite, or the divisor is 0 (n = 1 with `log_n`). A Python float (float64 arithmetic)."""
    div = divisor_value(divisor, n)
    return median / div if (median > 0 and div > 0 and math.isfinite(median)) else 1.0


def bandwidth_from_median(median: float, divisor: str, n: int, like: Tensor) -> Tensor:
    """`bandwidth_value` as a detached 0-dim tensor in `like`'s dtype and device."""
    return torch.tensor(bandwidth_value(median, divisor, n), dtype=like.dtype, device=like.device)


def median_value(values: Tensor) -> float:
    """Median of all entries of `values` (numpy's convention: the mean of the two middle order statistics of
    an even count), by O(N) selection; `values` is left unchanged. NaN for an empty tensor."""
    if values.numel() == 0:
        return float("nan")
    return _select_median(values.detach().reshape(-1).clone(), values.numel())


#: `distance_median` takes the median over the leading block of this many rows and columns beyond it.
DISTANCE_MEDIAN_MAX_SIDE = 2048


def distance_median(sq: Tensor, *, distinct_pairs: bool = False) -> float:
    """Median of a matrix of squared distances the caller already has: all entries of a cross-distance
    matrix [n, m] (two batches), or with `distinct_pairs` the i < j entries of one batch's square matrix.
    Above 2048² entries, over its leading 2048 × 2048 block (the generative methods' batches are i.i.d.
    draws, so the leading rows are a random subset). NaN when there are no entries."""
    values = sq.detach()
    if values.shape[0] * values.shape[1] > DISTANCE_MEDIAN_MAX_SIDE**2:
        values = values[:DISTANCE_MEDIAN_MAX_SIDE, :DISTANCE_MEDIAN_MAX_SIDE]
    if not distinct_pairs:
        return median_value(values)
    rows, cols = torch.triu_indices(values.shape[0], values.shape[1], offset=1, device=values.device)
    flat = values[rows, cols]  # a gather: a fresh tensor, selected in place
    return _select_median(flat, flat.numel()) if flat.numel() else float("nan")


def median_heuristic(
    X: Tensor,
    *,
    divisor: str = "log_n",
    include_diagonal: bool = False,
    method: str = "auto",
    subsample_size: int = 2048,
    seed: int = 0,
    backend: str = "auto",
    memory_budget: int | None = None,
) -> Tensor:
    """h = med(||x_i - x_j||²) / divisor(n), the median heuristic of SVGD (Liu & Wang 2016, §5) for
    k = exp(-r²/h); h = 1 if the median is 0. A detached 0-dim tensor (X's dtype and device).

    The divisor always uses the full n, also when the median is subsampled. See `median_sq_dist` for the
    options.
    """
    divisor_value(divisor, 2)  # validates the name
    median = median_sq_dist(
        X,
        include_diagonal=include_diagonal,
        method=method,
        subsample_size=subsample_size,
        seed=seed,
        backend=backend,
        memory_budget=memory_budget,
    )
    return bandwidth_from_median(median, divisor, X.shape[0], X)


class BandwidthRule:
    """`rule(X) -> h` (detached 0-dim tensor); stateless unless it says otherwise."""

    name = "rule"

    def __call__(self, X: Tensor) -> Tensor:
        raise NotImplementedError

    def with_sq_dists(self, X: Tensor) -> tuple[Tensor, Tensor | None]:
        """(h, the squared-distance matrix of X that the rule formed, or None): the same h as `rule(X)` (and the
        same state update), plus, where the rule took an exact median over all of X, its [n, n] matrix of the
        particles centred by their mean, exact 0 on the diagonal, for a caller to reuse (and overwrite)."""
        return self(X), None

    def state_dict(self) -> dict[str, Any]:
        return {}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        if state:
            raise ValueError(f"bandwidth rule {self.name!r} is stateless, got state keys {sorted(state)}")


class MedianRule(BandwidthRule):
    """The median heuristic (exact, or over a fixed seeded subsample)."""

    def __init__(
        self,
        *,
        divisor: str = "log_n",
        include_diagonal: bool = False,
        subsampled: bool = False,
        subsample_size: int = 2048,
        seed: int = 0,
        backend: str = "auto",
        memory_budget: int | None = None,
    ):
        divisor_value(divisor, 2)
        self.name = "median_subsampled" if subsampled else "median"
        self.divisor = divisor
        self.include_diagonal = include_diagonal
        self.method = "subsample" if subsampled else "exact"
        self.subsample_size = subsample_size
        self.seed = seed
        self.backend = backend
        self.memory_budget = memory_budget

    def __call__(self, X: Tensor) -> Tensor:
        return median_heuristic(
            X,
            divisor=self.divisor,
            include_diagonal=self.include_diagonal,
            method=self.method,
            subsample_size=self.subsample_size,
            seed=self.seed,
            backend=self.backend,
            memory_budget=self.memory_budget,
        )

    def with_sq_dists(self, X: Tensor) -> tuple[Tensor, Tensor | None]:
        median, sq = median_and_sq_dists(
            X,
            include_diagonal=self.include_diagonal,
            method=self.method,
            subsample_size=self.subsample_size,
            seed=self.seed,
            backend=self.backend,
            memory_budget=self.memory_budget,
            keep=True,
        )
        return bandwidth_from_median(median, self.divisor, X.shape[0], X), sq


class FixedRule(BandwidthRule):
    name = "fixed"

    def __init__(self, value: float):
        if isinstance(value, bool) or not isinstance(value, int | float) or not (0 < value < math.inf):
            raise ValueError(f"a fixed bandwidth must be a finite number > 0, got {value!r}")
        self.value = float(value)

    def __call__(self, X: Tensor) -> Tensor:
        return torch.tensor(self.value, dtype=X.dtype, device=X.device)


class ScaledRule(BandwidthRule):
    """factor × another rule (default: the median heuristic)."""

    name = "scaled"

    def __init__(self, factor: float, base: BandwidthRule):
        if isinstance(factor, bool) or not isinstance(factor, int | float) or not (0 < factor < math.inf):
            raise ValueError(f"the bandwidth factor must be a finite number > 0, got {factor!r}")
        self.factor = float(factor)
        self.base = base

    def __call__(self, X: Tensor) -> Tensor:
        return self.base(X) * self.factor

    def with_sq_dists(self, X: Tensor) -> tuple[Tensor, Tensor | None]:
        h, sq = self.base.with_sq_dists(X)
        return h * self.factor, sq

    def state_dict(self) -> dict[str, Any]:
        return self.base.state_dict()

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.base.load_state_dict(state)


class RunningAverageRule(BandwidthRule):
    """Exponential moving average of another rule: h_t = m·h_{t-1} + (1 - m)·base_t, h_0 = base_0.

    The average is kept as a Python float (float64) so checkpoints round-trip bit-identically, whatever the
    device or dtype of the particles; `state_dict()` = {"value": float | None, "steps": int}.
    """

    name = "running_average"

    def __init__(self, base: BandwidthRule, momentum: float):
        if isinstance(momentum, bool) or not isinstance(momentum, int | float) or not (0 <= momentum < 1):
            raise ValueError(f"momentum must be in [0, 1), got {momentum!r}")
        self.base = base
        self.momentum = float(momentum)
        self.value: float | None = None
        self.steps = 0

    def __call__(self, X: Tensor) -> Tensor:
        return self._update(self.base(X), X)

    def with_sq_dists(self, X: Tensor) -> tuple[Tensor, Tensor | None]:
        current, sq = self.base.with_sq_dists(X)
        return self._update(current, X), sq

    def _update(self, current: Tensor, X: Tensor) -> Tensor:
        value = float(current)
        if self.value is None:
            self.value = value
        else:
            self.value = self.momentum * self.value + (1.0 - self.momentum) * value
        self.steps += 1
        return torch.tensor(self.value, dtype=X.dtype, device=X.device)

    def state_dict(self) -> dict[str, Any]:
        return {"value": self.value, "steps": self.steps, "base": self.base.state_dict()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        expected = {"value", "steps", "base"}
        if set(state) != expected:
            raise ValueError(f"running_average state must have keys {sorted(expected)}, got {sorted(state)}")
        value, steps = state["value"], state["steps"]
        if value is not None and (isinstance(value, bool) or not isinstance(value, int | float)):
            raise ValueError(f"running_average state 'value' must be a float or None, got {value!r}")
        if isinstance(steps, bool) or not isinstance(steps, int) or steps < 0:
            raise ValueError(f"running_average state 'steps' must be an integer >= 0, got {steps!r}")
        self.base.load_state_dict(state["base"])
        self.value = None if value is None else float(value)
        self.steps = steps


def bandwidth_rule_from_options(
    options: BandwidthOptions, *, backend: str = "auto", memory_budget: int | None = None
) -> BandwidthRule:
    """The rule a `BandwidthOptions` schema describes (see its docstring for the semantics)."""
    if not isinstance(options, BandwidthOptions):
        raise ValueError(f"options must be BandwidthOptions, got {type(options).__name__}")

    def median(subsampled: bool) -> MedianRule:
        return MedianRule(
            divisor=options.divisor,
            include_diagonal=options.include_diagonal,
            subsampled=subsampled,
            subsample_size=options.subsample_size,
            seed=options.seed,
            backend=backend,
            memory_budget=memory_budget,
        )

    def simple(name: str) -> BandwidthRule:
        if name == "median":
            return median(False)
        if name == "median_subsampled":
            return median(True)
        if name == "scaled":
            return ScaledRule(options.factor, median(False))
        if name == "fixed":
            if options.value is None:
                raise ValueError("rule 'fixed' needs a bandwidth value")
            return FixedRule(options.value)
        raise ValueError(f"unknown bandwidth rule {name!r}")

    if options.rule == "running_average":
        return RunningAverageRule(simple(options.average_of), options.momentum)
    return simple(options.rule)
