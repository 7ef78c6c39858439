"""The fixed function table of the expression language (torch-free: the parser checks names and arity).

Every function has one fixed arity, checked at parse time, and one shape rule:

- ``elementwise``: arguments are scalars or vectors of one common length; the result has that shape.
- ``reduction``: one vector argument, reduced over its elements to a scalar.
- ``dot``: two vectors of equal length → scalar.
- ``where``: ``where(cond, a, b)``; ``cond`` is a comparison (the only place comparisons may appear),
  the three shapes broadcast like ``elementwise``.
- ``linalg``: matrices (square n×n where a factorisation is involved), one rule per function:
    ``sqdist(a, b)``   vectors of lengths r, c → the r×c matrix (a_i − b_j)²; matrices r×p, c×p → the r×c
                       matrix of squared distances between their rows;
    ``eye(n)``         n an integer literal → the n×n identity;
    ``diag(a)``        a vector of length n → the n×n diagonal matrix; a square matrix → its diagonal;
    ``cholesky(A)``    the lower Cholesky factor of (A + Aᵀ)/2 (so a non-symmetric A is not silently cut to
                       its lower triangle); NaN everywhere when that is not positive definite;
    ``trisolve(L, b)`` z with L z = b, L lower-triangular n×n (its upper triangle is not read), b a vector of
                       length n or an n×k matrix; z has b's shape;
    ``logdet(A)``      log det of the symmetric positive definite (A + Aᵀ)/2 by Cholesky; NaN otherwise;
    ``log_mvnormal(y, mean, cov)``  log N(y; mean, cov), y a vector of length n, mean a scalar or such a
                       vector, cov n×n (its symmetric part); NaN where that is not positive definite.

Elementwise functions and + - * / ** also take matrices (numpy broadcasting: a scalar everywhere, a vector of
length c as every row of an r×c matrix); reductions and ``dot`` take vectors only.

The torch implementations live in `compiler.py`; this module only describes them.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Literal

FunctionKind = Literal["elementwise", "reduction", "dot", "where", "linalg"]


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
    # matrices (Gaussian processes): shape rules above; NaN, never an exception, for a matrix that is not SPD
    FunctionSpec("sqdist", 2, "linalg", "matrix of squared distances (a_i - b_j)^2 (rows of matrices)"),
    FunctionSpec("eye", 1, "linalg", "eye(n): the n x n identity, n an integer literal"),
    FunctionSpec("diag", 1, "linalg", "diagonal matrix of a vector, or the diagonal of a square matrix"),
    FunctionSpec("cholesky", 1, "linalg", "lower Cholesky factor of the symmetric part of A (NaN if not SPD)"),
    FunctionSpec("trisolve", 2, "linalg", "z with L z = b, L lower-triangular"),
    FunctionSpec("logdet", 1, "linalg", "log det of an SPD matrix, by Cholesky (NaN if not SPD)"),
    FunctionSpec("log_mvnormal", 3, "linalg", "log N(y; mean, cov), multivariate normal (NaN if cov not SPD)"),
)

FUNCTIONS: Mapping[str, FunctionSpec] = MappingProxyType({spec.name: spec for spec in _TABLE})

# Named constants usable in expressions.
CONSTANTS: Mapping[str, float] = MappingProxyType({"pi": 3.141592653589793, "e": 2.718281828459045})
