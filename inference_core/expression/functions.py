"""The fixed function table of the expression language (torch-free: the parser checks names and arity).

Every function has one fixed arity, checked at parse time, and one shape rule:

- ``elementwise``: arguments are scalars or vectors of one common length; the result has that shape.
- ``reduction``: one vector argument, reduced over its elements to a scalar.
- ``dot``: two vectors of equal length → scalar.
- ``where``: ``where(cond, a, b)``; ``cond`` is a comparison (the only place comparisons may appear),
  the three shapes broadcast like ``elementwise``.

The torch implementations live in `compiler.py`; this module only describes them.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Literal

FunctionKind = Literal["elementwise", "reduction", "dot", "where"]


@dataclass(frozen=True)
class FunctionSpec:
    name: str
    arity: int
    kind: FunctionKind
    summary: str


_TABLE: tuple[FunctionSpec, ...] = (
    # elementwise, one argument
    FunctionSpec("exp", 1, "elementwise", "e^a"),
    FunctionSpec("log", 1, "elementwise", "natural logarithm (NaN for a < 0, -inf at 0)"),
    FunctionSpec("log1p", 1, "elementwise", "log(1 + a), accurate for small a"),
    FunctionSpec("expm1", 1, "elementwise", "e^a - 1, accurate for small a"),
    FunctionSpec("sqrt", 1, "elementwise", "square root (NaN for a < 0)"),
    FunctionSpec("square", 1, "elementwise", "a²"),
    FunctionSpec("abs", 1, "elementwise", "|a|"),
    FunctionSpec("sin", 1, "elementwise", "sine"),
    FunctionSpec("cos", 1, "elementwise", "cosine"),
    FunctionSpec("tanh", 1, "elementwise", "hyperbolic tangent"),
    FunctionSpec("sigmoid", 1, "elementwise", "1 / (1 + e^-a)"),
    FunctionSpec("log_sigmoid", 1, "elementwise", "log(sigmoid(a)), computed stably"),
    FunctionSpec("softplus", 1, "elementwise", "log(1 + e^a), computed stably"),
    FunctionSpec("lgamma", 1, "elementwise", "log|Γ(a)| (C99: +inf at the poles and at ±inf)"),
    # elementwise, several arguments
    FunctionSpec("maximum", 2, "elementwise", "elementwise max(a, b)"),
    FunctionSpec("minimum", 2, "elementwise", "elementwise min(a, b)"),
    FunctionSpec("logaddexp", 2, "elementwise", "log(e^a + e^b), computed stably"),
    FunctionSpec("clip", 3, "elementwise", "minimum(maximum(a, lo), hi)"),
    # log-densities, elementwise with broadcasting; NaN where a parameter is out of its domain
    FunctionSpec("log_normal", 3, "elementwise", "log N(a; loc, scale) (normal density, not log-normal)"),
    FunctionSpec("log_laplace", 3, "elementwise", "log Laplace(a; loc, scale)"),
    FunctionSpec("log_cauchy", 3, "elementwise", "log Cauchy(a; loc, scale)"),
    FunctionSpec("log_student_t", 4, "elementwise", "log StudentT(a; df, loc, scale)"),
    FunctionSpec("log_gamma_pdf", 3, "elementwise", "log Gamma(a; shape, rate); -inf for a < 0"),
    FunctionSpec("log_beta_pdf", 3, "elementwise", "log Beta(a; alpha, beta); -inf outside [0, 1]"),
    # reductions over the vector
    FunctionSpec("sum", 1, "reduction", "sum of the elements"),
    FunctionSpec("mean", 1, "reduction", "mean of the elements"),
    FunctionSpec("prod", 1, "reduction", "product of the elements"),
    FunctionSpec("max", 1, "reduction", "largest element (use maximum(a, b) elementwise)"),
    FunctionSpec("min", 1, "reduction", "smallest element (use minimum(a, b) elementwise)"),
    FunctionSpec("logsumexp", 1, "reduction", "log Σ e^{a_i}, computed stably"),
    FunctionSpec("norm", 1, "reduction", "Euclidean norm sqrt(Σ a_i²)"),
    FunctionSpec("dot", 2, "dot", "Σ a_i b_i"),
    FunctionSpec("where", 3, "where", "where(cond, a, b): a where cond holds, else b (both are evaluated)"),
)

FUNCTIONS: Mapping[str, FunctionSpec] = MappingProxyType({spec.name: spec for spec in _TABLE})

# Named constants usable in expressions.
CONSTANTS: Mapping[str, float] = MappingProxyType({"pi": 3.141592653589793, "e": 2.718281828459045})
