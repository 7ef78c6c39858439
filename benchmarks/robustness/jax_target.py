"""An `expression` target as a JAX log-density, for running other samplers (NumPyro's NUTS) on the suite's problems.

    logp = jax_log_density(problem.target_spec())          # x [dim] -> log p(x), a scalar
    logp = jax_log_density(spec, dtype=jnp.float64)        # the params in float64 (needs jax x64 enabled)

The spec is validated and parsed by the `expression` target's own builder (inference_core/targets/expression.py:
its data-set params loaded, `parse_expression` against them; `parse_spec` takes the parsed IR and the params from
the torch target it builds), the compiler's stabilising rewrite is applied to the IR as the compiler applies it
(inference_core/expression/stabilize.py: ``log`` of a sum of ``exp`` terms is evaluated with its largest exponent
shifted out, so the suite's mixture_naive stays finite), and each IR node and function is mapped to its
jax.numpy / jax.scipy counterpart, written to match inference_core/expression/compiler.py term by term (the same
order of operations, the same NaN outside a distribution parameter's domain, the same asymptotic series in
log_student_t's lgamma ratio; the matrix functions by Cholesky, NaN where a matrix is not positive definite). So
every problem in the suite, and any `expression` target, works without a hand-written model;
tests/unit/benchmarks/test_jax_target.py checks the value and the gradient against the torch target in float64.

Layout: one particle at a time (NumPyro's potential_fn takes one position): a scalar node is a 0-d array, a
vector node [L], a matrix [r, c]; numpy broadcasting is the language's (a scalar everywhere, a vector of length c
as every row of an r×c matrix). Literal constants stay Python floats (weakly typed), so they take x's dtype as the
compiler's constants take the target's. `jax.vmap` the result for batches.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from typing import Any

import jax
import jax.numpy as jnp
import jax.scipy.special as jsp
import numpy as np

from inference_core.expression import ir
from inference_core.expression.parser import Expression
from inference_core.expression.stabilize import stabilize as stabilize_ir

Array = jax.Array
_HALF_LOG_2PI = 0.5 * math.log(2 * math.pi)


# --- the function table (compiler.py's ELEMENTWISE / REDUCTIONS, in JAX) -------------------------------------


def _nan_unless(valid: Array, value: Array) -> Array:
    return jnp.where(valid, value, jnp.nan)


def _positive(*params: Array) -> Array:
    valid = jnp.isfinite(params[0]) & (params[0] > 0)
    for param in params[1:]:
        valid = valid & jnp.isfinite(param) & (param > 0)
    return valid


def _log_normal(a: Array, loc: Array, scale: Array) -> Array:
    z = (a - loc) / scale
    return _nan_unless(_positive(scale) & jnp.isfinite(loc), -0.5 * z * z - jnp.log(scale) - _HALF_LOG_2PI)


def _log_laplace(a: Array, loc: Array, scale: Array) -> Array:
    value = -jnp.log(2 * scale) - jnp.abs(a - loc) / scale
    return _nan_unless(_positive(scale) & jnp.isfinite(loc), value)


def _log_cauchy(a: Array, loc: Array, scale: Array) -> Array:
    z = (a - loc) / scale
    value = -math.log(math.pi) - jnp.log(scale) - jnp.log1p(z * z)
    return _nan_unless(_positive(scale) & jnp.isfinite(loc), value)


def _lgamma_half_ratio(z: Array) -> Array:
    """log Γ(z + ½) − log Γ(z), the asymptotic series from z = 32 on (as compiler.py)."""
    large = z >= 32
    safe = jnp.where(large, z, 32.0)
    inverse = 1 / safe
    inverse2 = inverse * inverse
    series = 0.5 * jnp.log(safe) - inverse * (
        1 / 8 - inverse2 * (1 / 192 - inverse2 * (1 / 640 - inverse2 * (17 / 14336)))
    )
    return jnp.where(large, series, jsp.gammaln(z + 0.5) - jsp.gammaln(z))


def _log_student_t(a: Array, df: Array, loc: Array, scale: Array) -> Array:
    z = (a - loc) / scale
    normal_limit = jnp.isposinf(df)
    finite_df = jnp.where(normal_limit, jnp.ones_like(df), df)
    value = (
        _lgamma_half_ratio(0.5 * finite_df)
        - 0.5 * jnp.log(finite_df * math.pi)
        - jnp.log(scale)
        - 0.5 * (finite_df + 1) * jnp.log1p(z * z / finite_df)
    )
    value = jnp.where(normal_limit, -0.5 * z * z - jnp.log(scale) - _HALF_LOG_2PI, value)
    return _nan_unless((normal_limit | _positive(df)) & _positive(scale) & jnp.isfinite(loc), value)


def _log_gamma_pdf(a: Array, shape: Array, rate: Array) -> Array:
    value = jsp.xlogy(shape, rate) + jsp.xlogy(shape - 1, a) - rate * a - jsp.gammaln(shape)
    value = jnp.where(a < 0, -jnp.inf, value)
    return _nan_unless(_positive(shape, rate), value)


def _log_beta_pdf(a: Array, alpha: Array, beta: Array) -> Array:
    value = (jsp.xlogy(alpha - 1, a) + jsp.xlog1py(beta - 1, -a) + jsp.gammaln(alpha + beta)
             - jsp.gammaln(alpha) - jsp.gammaln(beta))
    value = jnp.where((a < 0) | (a > 1), -jnp.inf, value)
    return _nan_unless(_positive(alpha, beta), value)


ELEMENTWISE: Mapping[str, Callable[..., Array]] = {
    "exp": jnp.exp,
    "log": jnp.log,
    "log1p": jnp.log1p,
    "expm1": jnp.expm1,
    "sqrt": jnp.sqrt,
    "square": jnp.square,
    "abs": jnp.abs,
    "sin": jnp.sin,
    "cos": jnp.cos,
    "tanh": jnp.tanh,
    "sigmoid": jax.nn.sigmoid,
    "log_sigmoid": jax.nn.log_sigmoid,
    "softplus": lambda a: jnp.logaddexp(a, 0.0),  # exact log(1 + e^a) everywhere, as compiler.py's
    "lgamma": jsp.gammaln,
    "maximum": jnp.maximum,
    "minimum": jnp.minimum,
    "logaddexp": jnp.logaddexp,
    "clip": lambda a, lo, hi: jnp.minimum(jnp.maximum(a, lo), hi),
    "log_normal": _log_normal,
    "log_laplace": _log_laplace,
    "log_cauchy": _log_cauchy,
    "log_student_t": _log_student_t,
    "log_gamma_pdf": _log_gamma_pdf,
    "log_beta_pdf": _log_beta_pdf,
}

REDUCTIONS: Mapping[str, Callable[[Array], Array]] = {
    "sum": lambda t: jnp.sum(t, -1),
    "mean": lambda t: jnp.mean(t, -1),
    "prod": lambda t: jnp.prod(t, -1),
    "max": lambda t: jnp.max(t, -1),
    "min": lambda t: jnp.min(t, -1),
    "logsumexp": lambda t: jsp.logsumexp(t, -1),
    "norm": lambda t: jnp.linalg.norm(t, axis=-1),
}

_COMPARISONS: Mapping[str, Callable[[Array, Array], Array]] = {
    "<": jnp.less, "<=": jnp.less_equal, ">": jnp.greater, ">=": jnp.greater_equal,
    "==": jnp.equal, "!=": jnp.not_equal,
}



def _symmetric(a: Array) -> Array:
    return 0.5 * (a + a.T)


def _cholesky(a: Array) -> Array:
    """Lower Cholesky factor of the symmetric part; NaN everywhere when it is not positive definite (as JAX's)."""
    return jnp.linalg.cholesky(_symmetric(a))


def _sqdist(a: Array, b: Array) -> Array:
    if a.ndim == 1:
        return jnp.square(a[:, None] - b[None, :])
    return jnp.sum(jnp.square(a[:, None, :] - b[None, :, :]), -1)


def _logdet(a: Array) -> Array:
    return 2 * jnp.sum(jnp.log(jnp.diagonal(_cholesky(a))))


def _trisolve(lower: Array, b: Array) -> Array:
    return jax.scipy.linalg.solve_triangular(lower, b, lower=True)


def _log_mvnormal(y: Array, mean: Array, cov: Array) -> Array:
    lower = _cholesky(cov)
    z = _trisolve(lower, y - mean)
    return -0.5 * jnp.sum(z * z) - jnp.sum(jnp.log(jnp.diagonal(lower))) - y.shape[0] * _HALF_LOG_2PI


#: functions.py's ``linalg`` kind (``eye`` is handled in `_Evaluator._Call`: its size is the node's shape)
LINALG: Mapping[str, Callable[..., Array]] = {
    "sqdist": _sqdist,
    "diag": lambda a: jnp.diag(a) if a.ndim == 1 else jnp.diagonal(a),
    "cholesky": _cholesky,
    "trisolve": _trisolve,
    "logdet": _logdet,
    "log_mvnormal": _log_mvnormal,
}

#: the functions with a JAX counterpart here (a spec calling any other fails in `jax_log_density`)
SUPPORTED = frozenset({*ELEMENTWISE, *REDUCTIONS, *LINALG, "eye", "dot", "where"})


# --- evaluation of the IR ---------------------------------------------------------------------------------


class _Evaluator:
    """Evaluates the (stabilised) IR at one particle x [dim] with the params as jnp arrays."""

    def __init__(self, x: Array, params: Mapping[str, Array]):
        self.x, self.params = x, params

    def __call__(self, node: ir.Node) -> Array:
        method = getattr(self, f"_{type(node).__name__}", None)
        if method is None:
            raise ValueError(f"jax_target: unknown IR node {type(node).__name__}")
        return method(node)

    def _Const(self, node: ir.Const) -> Any:
        return node.value

    def _Input(self, node: ir.Input) -> Array:
        return self.x

    def _Param(self, node: ir.Param) -> Array:
        return self.params[node.name]

    def _Index(self, node: ir.Index) -> Array:
        operand = self(node.operand)
        if len(node.operand.shape) == 1 or len(node.indices) == 1:  # vector element, or a matrix row
            return operand[node.indices[0]]
        i, j = node.indices
        return operand[i, j]

    def _Slice(self, node: ir.Slice) -> Array:
        value = self(node.operand)[..., node.start:node.stop:node.step]
        return jnp.flip(value, -1) if node.reverse else value

    def _Add(self, node: ir.Add) -> Array:
        total = self(node.terms[0])
        for term, subtract in zip(node.terms[1:], node.negate[1:], strict=True):
            total = total - self(term) if subtract else total + self(term)
        return total

    def _Mul(self, node: ir.Mul) -> Array:
        product = self(node.factors[0])
        for factor, divide in zip(node.factors[1:], node.divide[1:], strict=True):
            product = product / self(factor) if divide else product * self(factor)
        return product

    def _Neg(self, node: ir.Neg) -> Array:
        return -self(node.operand)

    def _Pow(self, node: ir.Pow) -> Array:
        exponent: float | int = int(node.exponent) if node.exponent.is_integer() else node.exponent
        return jnp.power(self(node.base), exponent)  # an int exponent is lax.integer_pow, as torch.pow's

    def _MatMul(self, node: ir.MatMul) -> Array:
        left, right = self(node.left), self(node.right)
        if len(node.left.shape) == 2 or len(node.right.shape) == 2:
            return left @ right
        return jnp.sum(left * right, -1)

    def _Call(self, node: ir.Call) -> Array:
        name = node.name
        if name == "where":
            cond, a, b = (self(arg) for arg in node.args)
            return jnp.where(cond, a, b)
        if name in REDUCTIONS:
            return REDUCTIONS[name](self(node.args[0]))
        if name == "dot":
            a, b = (self(arg) for arg in node.args)
            return jnp.sum(a * b, -1)
        if name == "eye":
            return jnp.eye(node.shape[0], dtype=self.x.dtype)
        function = ELEMENTWISE.get(name) or LINALG.get(name)
        if function is None:
            raise NotImplementedError(f"jax_target: no JAX counterpart for the expression function {name!r}")
        return function(*(self(arg) for arg in node.args))

    def _ShiftedLogSum(self, node: ir.ShiftedLogSum) -> Array:
        """m + log(R(Σ ±c_i·exp(a_i − m))), m = max a_i with no gradient; shift 0 where m is not finite."""
        values = [None if a is None else self(a) for a in node.exponents]
        present = [value for value in values if value is not None]
        m = jax.lax.stop_gradient(present[0])
        for value in present[1:]:
            m = jnp.maximum(m, jax.lax.stop_gradient(value))
        if any(value is None for value in values):  # c·e^0 takes part in the max
            m = jnp.maximum(m, 0.0)
        if node.reduction is not None:
            m = jnp.max(m)  # a scalar exponent broadcasts over the vector; max over all of it
        shift = jnp.where(jnp.isfinite(m), m, 0.0)
        total: Array | None = None
        for coefficient, value, subtract in zip(node.coefficients, values, node.negate, strict=True):
            term = jnp.exp(-shift if value is None else value - shift)
            if coefficient is not None:
                term = self(coefficient) * term
            if total is None:
                total = -term if subtract else term
            else:
                total = total - term if subtract else total + term
        assert total is not None
        if node.reduction is not None:
            total = REDUCTIONS[node.reduction](total)
        return shift + jnp.log(total)

    def _Compare(self, node: ir.Compare) -> Array:
        values = [self(operand) for operand in node.operands]
        result = _COMPARISONS[node.ops[0]](values[0], values[1])
        for k in range(1, len(node.ops)):
            result = result & _COMPARISONS[node.ops[k]](values[k], values[k + 1])
        return result

    def _Logical(self, node: ir.Logical) -> Array:
        combine = jnp.logical_and if node.op == "and" else jnp.logical_or
        result = self(node.operands[0])
        for operand in node.operands[1:]:
            result = combine(result, self(operand))
        return result

    def _Not(self, node: ir.Not) -> Array:
        return jnp.logical_not(self(node.operand))


def _called(node: ir.Node) -> set[str]:
    """Names of the functions called anywhere under node."""
    names = {node.name} if isinstance(node, ir.Call) else set()
    for field in getattr(node, "__dataclass_fields__", {}):
        value = getattr(node, field)
        for child in value if isinstance(value, tuple) else (value,):
            if isinstance(child, ir.Node):
                names |= _called(child)
    return names


def parse_spec(spec: Mapping[str, Any]) -> tuple[Expression, dict[str, np.ndarray]]:
    """The parsed expression and the params (float64 numpy) of an `expression` target spec, taken from the torch
    target's own builder (inference_core/targets/expression.py: validation, data-set params loaded, parsed against
    them with parse_expression), so both evaluate the same IR on the same numbers."""
    import torch

    from inference_core.targets import BuildContext, build_target

    target = build_target(dict(spec), BuildContext(dtype=torch.float64))
    if getattr(target, "kind", None) != "expression":
        raise ValueError(f"jax_target: only `expression` targets, got {getattr(target, 'kind', None)!r}")
    params = {name: value.detach().cpu().numpy().astype(np.float64) for name, value in target.params.items()}
    return target.compiled.expression, params


def jax_log_density(spec: Mapping[str, Any], dtype: Any = None, stabilize: bool = True) -> Callable[[Array], Array]:
    """log p(x) of an `expression` target spec for one particle x [dim] (a scalar), traceable by jax.jit /
    jax.grad / jax.vmap. `dtype`: the params' dtype (default: float64 when jax x64 is enabled, else float32);
    `stabilize=False` evaluates the IR as written (the compiler's `stabilize` flag)."""
    expression, raw_params = parse_spec(spec)
    if dtype is None:
        dtype = jnp.float64 if jax.config.jax_enable_x64 else jnp.float32
    params = {name: jnp.asarray(value, dtype=dtype) for name, value in raw_params.items()}
    root = stabilize_ir(expression.root) if stabilize else expression.root
    missing = sorted(_called(root) - SUPPORTED)
    if missing:
        raise NotImplementedError(f"jax_target: no JAX counterpart for the expression function(s) {missing}")
    dim = expression.dim

    def log_density(x: Array) -> Array:
        if jnp.shape(x) != (dim,):
            raise ValueError(f"x must have shape [{dim}], got {list(jnp.shape(x))}")
        # a constant expression still gets x's dtype (and a zero gradient), as the compiler's x[:, :0].sum()
        return _Evaluator(x, params)(root) + jnp.sum(x[:0])

    return log_density
