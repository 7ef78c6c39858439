"""Compile checked expression IR (parser.py) into a closure of torch ops.

No Python code is generated or executed: each IR node becomes a small closure over its children's
closures, dispatched on the node type and on names from the fixed function table. The result maps
particles ``x[n, dim]`` to one log-density per particle ``[n]``.

Value layout while evaluating: a scalar node is a tensor of shape ``[n]`` (or ``[]`` when it does not
depend on x), a vector node ``[n, L]`` (or ``[L]``), a matrix ``[n, r, c]`` (or ``[r, c]``). When a scalar
meets a vector or a matrix it gets trailing axes, and a vector meeting a matrix becomes a row
(``unsqueeze(-2)``), so broadcasting follows the parse-time shapes. Reductions act on the last axis; the
matrix functions are in linalg.py.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor

from inference_core.expression import ir, linalg
from inference_core.expression.parser import Expression
from inference_core.expression.stabilize import stabilize as stabilize_ir


@dataclass(frozen=True)
class Env:
    """What a compiled expression reads: the particles, the params and the literal constants."""

    x: Tensor
    params: Mapping[str, Tensor]
    constants: Sequence[Tensor]


Evaluator = Callable[[Env], Tensor]
_HALF_LOG_2PI = 0.5 * math.log(2 * math.pi)


def _nan_unless(valid: Tensor, value: Tensor) -> Tensor:
    """NaN wherever a distribution parameter is outside its domain (the job's non-finite check sees it)."""
    return torch.where(valid, value, torch.full_like(value, math.nan))


def _positive(*params: Tensor) -> Tensor:
    """Every parameter finite and > 0."""
    valid = torch.isfinite(params[0]) & (params[0] > 0)
    for param in params[1:]:
        valid = valid & torch.isfinite(param) & (param > 0)
    return valid


# Log-densities: NaN when a parameter is non-finite or outside its domain (StudentT's df = +inf is allowed:
# it is the normal limit); -inf outside the support.


def _log_normal(a: Tensor, loc: Tensor, scale: Tensor) -> Tensor:
    z = (a - loc) / scale
    return _nan_unless(
        _positive(scale) & torch.isfinite(loc), -0.5 * z * z - torch.log(scale) - _HALF_LOG_2PI
    )


def _log_laplace(a: Tensor, loc: Tensor, scale: Tensor) -> Tensor:
    value = -torch.log(2 * scale) - torch.abs(a - loc) / scale
    return _nan_unless(_positive(scale) & torch.isfinite(loc), value)


def _log_cauchy(a: Tensor, loc: Tensor, scale: Tensor) -> Tensor:
    z = (a - loc) / scale
    value = -math.log(math.pi) - torch.log(scale) - torch.log1p(z * z)
    return _nan_unless(_positive(scale) & torch.isfinite(loc), value)


def _lgamma_half_ratio(z: Tensor) -> Tensor:
    """log Γ(z + ½) − log Γ(z). The lgamma difference cancels catastrophically for large z (lgamma ~ z log z),
    so from z = 32 on use the asymptotic series ½ log z − 1/(8z) + 1/(192z³) − 1/(640z⁵) + 17/(14336z⁷)
    (truncation error < 1e-19 there)."""
    large = z >= 32
    safe = torch.where(large, z, torch.full_like(z, 32.0))  # keeps the unused branch finite for autograd
    inverse = 1 / safe
    inverse2 = inverse * inverse
    series = 0.5 * torch.log(safe) - inverse * (
        1 / 8 - inverse2 * (1 / 192 - inverse2 * (1 / 640 - inverse2 * (17 / 14336)))
    )
    return torch.where(large, series, torch.lgamma(z + 0.5) - torch.lgamma(z))


def _log_student_t(a: Tensor, df: Tensor, loc: Tensor, scale: Tensor) -> Tensor:
    """log StudentT(a; df, loc, scale); df = +inf is the normal limit."""
    z = (a - loc) / scale
    normal_limit = torch.isposinf(df)
    finite_df = torch.where(normal_limit, torch.ones_like(df), df)
    value = (
        _lgamma_half_ratio(0.5 * finite_df)
        - 0.5 * torch.log(finite_df * math.pi)
        - torch.log(scale)
        - 0.5 * (finite_df + 1) * torch.log1p(z * z / finite_df)
    )
    value = torch.where(normal_limit, -0.5 * z * z - torch.log(scale) - _HALF_LOG_2PI, value)
    return _nan_unless((normal_limit | _positive(df)) & _positive(scale) & torch.isfinite(loc), value)


def _log_gamma_pdf(a: Tensor, shape: Tensor, rate: Tensor) -> Tensor:
    # xlogy keeps a = 0 exact for shape = 1 (0 * log 0 = 0).
    value = torch.xlogy(shape, rate) + torch.xlogy(shape - 1, a) - rate * a - torch.lgamma(shape)
    value = torch.where(a < 0, torch.full_like(value, -math.inf), value)
    return _nan_unless(_positive(shape, rate), value)


def _log_beta_pdf(a: Tensor, alpha: Tensor, beta: Tensor) -> Tensor:
    value = (
        torch.xlogy(alpha - 1, a)
        + torch.special.xlog1py(beta - 1, -a)
        + torch.lgamma(alpha + beta)
        - torch.lgamma(alpha)
        - torch.lgamma(beta)
    )
    value = torch.where((a < 0) | (a > 1), torch.full_like(value, -math.inf), value)
    return _nan_unless(_positive(alpha, beta), value)


def _softplus(a: Tensor) -> Tensor:
    # Exact log(1 + e^a) for every a (F.softplus switches to a above a threshold).
    return torch.logaddexp(a, torch.zeros((), dtype=a.dtype, device=a.device))


def _clip(a: Tensor, lo: Tensor, hi: Tensor) -> Tensor:
    return torch.minimum(torch.maximum(a, lo), hi)


ELEMENTWISE: Mapping[str, Callable[..., Tensor]] = {
    "exp": torch.exp,
    "log": torch.log,
    "log1p": torch.log1p,
    "expm1": torch.expm1,
    "sqrt": torch.sqrt,
    "square": torch.square,
    "abs": torch.abs,
    "sin": torch.sin,
    "cos": torch.cos,
    "tanh": torch.tanh,
    "sigmoid": torch.sigmoid,
    "log_sigmoid": F.logsigmoid,
    "softplus": _softplus,
    "lgamma": torch.lgamma,
    "maximum": torch.maximum,
    "minimum": torch.minimum,
    "logaddexp": torch.logaddexp,
    "clip": _clip,
    "log_normal": _log_normal,
    "log_laplace": _log_laplace,
    "log_cauchy": _log_cauchy,
    "log_student_t": _log_student_t,
    "log_gamma_pdf": _log_gamma_pdf,
    "log_beta_pdf": _log_beta_pdf,
}

REDUCTIONS: Mapping[str, Callable[[Tensor], Tensor]] = {
    "sum": lambda t: t.sum(-1),
    "mean": lambda t: t.mean(-1),
    "prod": lambda t: t.prod(-1),
    "max": lambda t: t.amax(-1),
    "min": lambda t: t.amin(-1),
    "logsumexp": lambda t: torch.logsumexp(t, -1),
    "norm": lambda t: torch.linalg.vector_norm(t, dim=-1),
}

_LINALG = frozenset({"sqdist", "eye", "diag", "cholesky", "trisolve", "logdet", "log_mvnormal"})

_COMPARISONS: Mapping[str, Callable[[Tensor, Tensor], Tensor]] = {
    "<": torch.lt,
    "<=": torch.le,
    ">": torch.gt,
    ">=": torch.ge,
    "==": torch.eq,
    "!=": torch.ne,
}


class CompiledExpression:
    """`evaluate(x[n, dim], params, constants) -> [n]`; `constants` are the literal values in IR order,
    materialised by the caller in its dtype/device (see `make_constants`).

    With `stabilize` (the default) ``log`` of a sum of exp terms is evaluated with its largest exponent
    shifted out (stabilize.py); `stabilize=False` compiles the parser's IR as written (tests compare both)."""

    def __init__(self, expression: Expression, stabilize: bool = True):
        self.expression = expression
        self.constant_values: list[float] = []
        self._dispatch: dict[type, Callable[[Any], Evaluator]] = {
            ir.Const: self._compile_const,
            ir.Input: self._compile_input,
            ir.Param: self._compile_param,
            ir.Index: self._compile_index,
            ir.Slice: self._compile_slice,
            ir.Add: self._compile_add,
            ir.Mul: self._compile_mul,
            ir.Neg: self._compile_neg,
            ir.Pow: self._compile_pow,
            ir.MatMul: self._compile_matmul,
            ir.Call: self._compile_call,
            ir.Compare: self._compile_compare,
            ir.Logical: self._compile_logical,
            ir.Not: self._compile_not,
            ir.ShiftedLogSum: self._compile_shifted_log_sum,
        }
        self._root = self._compile(stabilize_ir(expression.root) if stabilize else expression.root)

    def make_constants(self, dtype: torch.dtype, device: torch.device | str) -> tuple[Tensor, ...]:
        values = torch.tensor(self.constant_values, dtype=dtype, device=device)
        return tuple(values.unbind())

    def evaluate(self, x: Tensor, params: Mapping[str, Tensor], constants: Sequence[Tensor]) -> Tensor:
        if x.dim() != 2 or x.shape[-1] != self.expression.dim:
            raise ValueError(f"x must have shape [n, {self.expression.dim}], got {list(x.shape)}")
        result = self._root(Env(x, params, constants))
        # An empty slice of x sums to an exact 0 and ties the result to x, so a constant expression still has
        # shape [n] and autograd returns a zero score instead of failing.
        return result + x[:, :0].sum(-1)

    # --- compilation -----------------------------------------------------------------------------------
    def _compile(self, node: ir.Node) -> Evaluator:
        compile_node = self._dispatch.get(type(node))
        if compile_node is None:
            raise ValueError(f"unknown IR node {type(node).__name__}")
        return compile_node(node)

    @staticmethod
    def _aligned(evaluator: Evaluator, node: ir.Node, shape: ir.Shape) -> Evaluator:
        """Give a scalar trailing axes where it meets a vector or a matrix, and a vector meeting a matrix
        the row axis."""
        have, want = len(node.shape), len(shape)
        if have >= want:
            return evaluator
        if have == 0 and want == 1:
            return lambda env: evaluator(env).unsqueeze(-1)
        if have == 0:
            return lambda env: evaluator(env).unsqueeze(-1).unsqueeze(-1)
        return lambda env: evaluator(env).unsqueeze(-2)

    def _compile_all(self, nodes: Sequence[ir.Node], shape: ir.Shape) -> list[Evaluator]:
        return [self._aligned(self._compile(node), node, shape) for node in nodes]

    def _compile_const(self, node: ir.Const) -> Evaluator:
        index = len(self.constant_values)
        self.constant_values.append(node.value)
        return lambda env: env.constants[index]

    def _compile_input(self, node: ir.Input) -> Evaluator:
        return lambda env: env.x

    def _compile_param(self, node: ir.Param) -> Evaluator:
        name = node.name
        return lambda env: env.params[name]

    def _compile_index(self, node: ir.Index) -> Evaluator:
        operand = self._compile(node.operand)
        if len(node.operand.shape) == 1:  # element of x (batched) or of a vector param
            (i,) = node.indices
            return lambda env: operand(env)[..., i]
        if len(node.indices) == 1:  # row of a matrix param
            (i,) = node.indices
            return lambda env: operand(env)[i]
        i, j = node.indices
        return lambda env: operand(env)[i, j]

    def _compile_slice(self, node: ir.Slice) -> Evaluator:
        operand = self._compile(node.operand)
        start, stop, step = node.start, node.stop, node.step
        if node.reverse:
            return lambda env: operand(env)[..., start:stop:step].flip(-1)
        return lambda env: operand(env)[..., start:stop:step]

    def _compile_add(self, node: ir.Add) -> Evaluator:
        terms = self._compile_all(node.terms, node.shape)
        negate = node.negate
        first, rest = terms[0], list(zip(terms[1:], negate[1:], strict=True))

        def add(env: Env) -> Tensor:
            total = first(env)
            for term, subtract in rest:
                total = total - term(env) if subtract else total + term(env)
            return total

        return add

    def _compile_mul(self, node: ir.Mul) -> Evaluator:
        factors = self._compile_all(node.factors, node.shape)
        first, rest = factors[0], list(zip(factors[1:], node.divide[1:], strict=True))

        def mul(env: Env) -> Tensor:
            product = first(env)
            for factor, divide in rest:
                product = product / factor(env) if divide else product * factor(env)
            return product

        return mul

    def _compile_neg(self, node: ir.Neg) -> Evaluator:
        operand = self._compile(node.operand)
        return lambda env: -operand(env)

    def _compile_pow(self, node: ir.Pow) -> Evaluator:
        base = self._compile(node.base)
        exponent: float | int = int(node.exponent) if node.exponent.is_integer() else node.exponent
        return lambda env: torch.pow(base(env), exponent)

    def _compile_matmul(self, node: ir.MatMul) -> Evaluator:
        left, right = self._compile(node.left), self._compile(node.right)
        if len(node.left.shape) == 2:  # matrix @ vector, either possibly batched
            return lambda env: linalg.matvec(left(env), right(env))
        if len(node.right.shape) == 2:  # vector @ matrix
            return lambda env: linalg.vecmat(left(env), right(env))
        return lambda env: (left(env) * right(env)).sum(-1)

    def _compile_call(self, node: ir.Call) -> Evaluator:
        name = node.name
        if name == "where":
            cond, a, b = self._compile_all(node.args, node.shape)
            return lambda env: torch.where(cond(env), a(env), b(env))
        if name in REDUCTIONS:
            reduce = REDUCTIONS[name]
            (operand,) = (self._compile(arg) for arg in node.args)
            return lambda env: reduce(operand(env))
        if name == "dot":
            a, b = (self._compile(arg) for arg in node.args)
            return lambda env: (a(env) * b(env)).sum(-1)
        if name in _LINALG:
            return self._compile_linalg(node)
        function = ELEMENTWISE[name]
        args = self._compile_all(node.args, node.shape)
        if len(args) == 1:
            (only,) = args
            return lambda env: function(only(env))
        return lambda env: function(*(arg(env) for arg in args))

    def _compile_linalg(self, node: ir.Call) -> Evaluator:
        name, shapes = node.name, [arg.shape for arg in node.args]
        if name == "eye":
            n = node.shape[0]
            return lambda env: linalg.eye(n, env.x)
        if name == "log_mvnormal":
            y, mean, cov = self._compile_all(node.args, node.args[0].shape)  # mean: a scalar gets the axis
            return lambda env: linalg.log_mvnormal(y(env), mean(env), cov(env))
        args = [self._compile(arg) for arg in node.args]
        if name == "sqdist":
            a, b = args
            rows = len(shapes[0]) == 2
            return lambda env: linalg.sqdist(a(env), b(env), rows)
        if name == "diag":
            (a,) = args
            of_matrix = len(shapes[0]) == 2
            return lambda env: linalg.diag(a(env), of_matrix)
        if name == "trisolve":
            lower, b = args
            b_is_matrix = len(shapes[1]) == 2
            return lambda env: linalg.trisolve(lower(env), b(env), b_is_matrix)
        (a,) = args  # cholesky, logdet
        function = linalg.cholesky if name == "cholesky" else linalg.logdet
        return lambda env: function(a(env))

    def _compile_shifted_log_sum(self, node: ir.ShiftedLogSum) -> Evaluator:
        """m + log(R(Σ ±c_i·exp(a_i − m))), m = max a_i detached; shift 0 where m is not finite (stabilize.py)."""
        shape = node.terms_shape
        coefficients = [None if c is None else self._aligned(self._compile(c), c, shape) for c in node.coefficients]
        exponents = [None if a is None else self._aligned(self._compile(a), a, shape) for a in node.exponents]
        terms = list(zip(coefficients, exponents, node.negate, strict=True))
        reduce = REDUCTIONS[node.reduction] if node.reduction is not None else None
        has_unit_term = any(a is None for a in exponents)  # c·e^0 takes part in the max

        def shifted_log_sum(env: Env) -> Tensor:
            values = [None if a is None else a(env) for a in exponents]
            present = [value for value in values if value is not None]
            m = present[0].detach()
            for value in present[1:]:
                m = torch.maximum(m, value.detach())  # NaN propagates, then the shift is 0
            if has_unit_term:
                m = torch.maximum(m, torch.zeros((), dtype=m.dtype, device=m.device))
            if reduce is not None:
                m = m.amax(-1)  # every aligned value ends in the vector axis (length L or 1)
            shift = torch.where(torch.isfinite(m), m, torch.zeros_like(m))
            inner_shift = shift.unsqueeze(-1) if reduce is not None else shift
            total: Tensor | None = None
            for (coefficient, _, subtract), value in zip(terms, values, strict=True):
                term = torch.exp(-inner_shift if value is None else value - inner_shift)
                if coefficient is not None:
                    term = coefficient(env) * term
                if total is None:
                    total = -term if subtract else term
                else:
                    total = total - term if subtract else total + term
            assert total is not None
            if reduce is not None:
                total = reduce(total)
            return shift + torch.log(total)

        return shifted_log_sum

    def _compile_compare(self, node: ir.Compare) -> Evaluator:
        operands = self._compile_all(node.operands, node.shape)
        comparisons = [_COMPARISONS[op] for op in node.ops]

        def compare(env: Env) -> Tensor:
            values = [operand(env) for operand in operands]
            result = comparisons[0](values[0], values[1])
            for k in range(1, len(comparisons)):
                result = result & comparisons[k](values[k], values[k + 1])
            return result

        return compare

    def _compile_logical(self, node: ir.Logical) -> Evaluator:
        operands = self._compile_all(node.operands, node.shape)
        combine = torch.logical_and if node.op == "and" else torch.logical_or

        def logical(env: Env) -> Tensor:
            result = operands[0](env)
            for operand in operands[1:]:
                result = combine(result, operand(env))
            return result

        return logical

    def _compile_not(self, node: ir.Not) -> Evaluator:
        operand = self._compile(node.operand)
        return lambda env: torch.logical_not(operand(env))


def compile_expression(expression: Expression, stabilize: bool = True) -> CompiledExpression:
    """Compile a parsed `Expression` (parser.parse_expression) to torch (`stabilize`: see CompiledExpression)."""
    return CompiledExpression(expression, stabilize)
