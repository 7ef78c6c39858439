"""A job's memory estimate, checked before it is accepted (issue 15: 100,000 particles × 1,000,000 dimensions
was accepted and then failed mid-run with `internal_error`).

It is an order-of-magnitude upper estimate of the working set, not a measurement: the largest arrays a method
holds at once, counted from the spec alone (torch-free, so the API can check it). Dense arrays of the target
itself are bounded by the request size cap and left out.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

from inference_core.schemas.kernels import EXACT_MAX_N, exact_median_over_particles

#: Bytes per number of each dtype option (methods without one compute in float32).
ITEMSIZE = {"float32": 4, "float64": 8}
#: [n, d] arrays a particle method holds at once: particles, score, kernel term, update, two Adam moments,
#: the checkpoint and evaluator copies, and torch's temporaries (SVGD at n = d = 4000 on the CPU grew by about
#: 15 of them).
PARTICLE_COPIES = 16
#: Row blocks of the chunked pairwise kernels (inference_core.kernels.dispatch default budget), counted once.
PAIRWISE_SCRATCH_BYTES = 256 * 1024**2
#: GFSF's dense solve: the n×n Gram matrix, its Cholesky factor, the right-hand side and temporaries, in
#: float64, up to kernels.solve.CHOLESKY_MAX_N particles (CG above that, chunked).
DENSE_SOLVE_MAX_N = 8192
DENSE_SOLVE_COPIES = 5  # GFSF at n = 8000 grew by about 4 n×n float64 arrays
#: The exact median heuristic (rules `median`, `scaled`, and `running_average` of either) holds all n² squared
#: distances (kernels.bandwidth refuses it beyond 11,585 particles), and on a GPU sorts them: the sorted copy and
#: its int64 indices, up to 4 arrays of n² numbers in all.
EXACT_MEDIAN_COPIES = 4
#: Default noise width k of a generator (methods.generative.base.DEFAULT_NOISE_DIM).
DEFAULT_NOISE_DIM = 64
#: Generator parameters held at once: weights, gradient, two Adam moments.
PARAMETER_COPIES = 4
#: [batch, width] activations kept per layer for the backward pass: forward value, gradient and temporaries
#: (amortised SVGD at n = 2000, d = 4000 grew by about 6 of them).
ACTIVATION_COPIES = 8


#: A memory rule: (validated options, n particles, dimension d, bytes per number) → bytes of the method's working
#: set, before the evaluator's reference draws and the pairwise scratch (which `job_memory_bytes` adds).
MemoryRule = Callable[[Any, int, int, int], int]

#: Each method's rule, by its options schema; registered next to the schema (`memory_rule`), looked up along
#: the options' class hierarchy. Schemas with none take `particle_bytes`.
MEMORY_RULES: dict[type, MemoryRule] = {}


def memory_rule(schema: type) -> Callable[[MemoryRule], MemoryRule]:
    """Register the decorated function as the memory rule of the options schema `schema` (and its subclasses
    that register none of their own)."""

    def register(rule: MemoryRule) -> MemoryRule:
        MEMORY_RULES[schema] = rule
        return rule

    return register


def rule_for(options: Any) -> MemoryRule:
    """The memory rule of an options object: the nearest registered class in its MRO, else `particle_bytes`."""
    for cls in type(options).__mro__:
        if cls in MEMORY_RULES:
            return MEMORY_RULES[cls]
    return particle_bytes


def mlp_parameters(widths: list[int]) -> int:
    """Weights and biases of a dense MLP with these layer widths (input first, output last)."""
    return sum((a + 1) * b for a, b in zip(widths[:-1], widths[1:], strict=True))


def dense_solve_bytes(n: int) -> int:
    """GFSF's dense float64 solve of n×n (DENSE_SOLVE_COPIES arrays)."""
    return DENSE_SOLVE_COPIES * n * n * 8


def particle_bytes(options: Any, n: int, d: int, itemsize: int) -> int:
    """The default rule (particle methods, `auto`, the function-space methods, the baselines): PARTICLE_COPIES
    [n, d] arrays, plus an exact median's n² distances where the kernel takes one."""
    return PARTICLE_COPIES * n * d * itemsize + _exact_median_bytes(options, n, itemsize)


def generator_noise_width(options: Any, d: int) -> int:
    """k, the noise prefix the generator reads (methods.generative.base)."""
    generator = options.generator
    return min(generator.noise_dim or min(d, DEFAULT_NOISE_DIM), d)


def generative_bytes(options: Any, n: int, d: int, itemsize: int, expectation: int | None = None) -> int:
    """The generators' rule: the generator's parameters (PARAMETER_COPIES) and its activations on the updated
    batch of n and an expectation batch of `expectation` draws (default n) (ACTIVATION_COPIES), noise of up to d
    columns included."""
    generator = options.generator
    k = generator_noise_width(options, d)
    widths = [k, *generator.hidden, d]
    batch = n + (expectation or n)
    total = PARAMETER_COPIES * mlp_parameters(widths) * itemsize
    return total + ACTIVATION_COPIES * batch * (d + sum(widths)) * itemsize


def _exact_median_bytes(options: Any, n: int, itemsize: int) -> int:
    """What an exact median over all n particles holds; nothing beyond EXACT_MAX_N (11,585) particles, where such
    a spec is refused (spec.validate_job_spec, after the memory check), so the term stays under about 2 GiB."""
    exact = n <= EXACT_MAX_N and exact_median_over_particles(options)
    return EXACT_MEDIAN_COPIES * n * n * itemsize if exact else 0


def job_memory_bytes(method: str, family: str, options: Any, num_particles: int, dim: int,
                     eval_reference_samples: int = 0) -> int:
    """Estimated peak bytes of a job: `method` and `family` from the catalog (kept for callers: the rule is the
    one registered for the options' schema, `rule_for`), `options` its validated option model, `dim` the target
    dimension, `eval_reference_samples` the evaluator's exact reference draws."""
    n, d = num_particles, dim
    itemsize = ITEMSIZE.get(getattr(options, "dtype", "float32"), 4)
    total = rule_for(options)(options, n, d, itemsize)
    total += eval_reference_samples * d * 8
    return int(total + PAIRWISE_SCRATCH_BYTES)


def format_bytes(value: int | float) -> str:
    """1536 → '1.5 KiB' (binary units, as the cap's setting is usually written)."""
    if value < 1024:
        return f"{int(value)} B"
    exponent = min(int(math.log(value, 1024)), 6)
    return f"{value / 1024**exponent:.1f} {'BKMGTPE'[exponent]}iB"
