"""IR pass: ``log`` of a sum of ``exp`` terms, evaluated with the largest exponent shifted out (torch-free).

Users write mixtures the obvious way, ``log(theta*exp(a) + (1-theta)*exp(b))`` with a, b ≈ −1000: each
exp underflows to 0 (float32 below ≈ −103, float64 below ≈ −745), the log is −inf and the job fails with
`target_nonfinite`. For any coefficients c_i and every finite m,

    log Σ_i c_i·e^{a_i} = m + log Σ_i c_i·e^{a_i − m},

so with m = max_i a_i (per particle and per element) the largest exponential is e^0 = 1 and nothing
underflows or overflows unless the whole sum does (the log-sum-exp trick; Blanchard, Higham & Higham 2021,
"Accurately computing the log-sum-exp and softmax functions", IMA J. Numer. Anal. 41(4)). The
identity needs no sign assumption on the c_i: a negative sum is still NaN. The compiler detaches m: the
right-hand side has zero derivative in m, so autograd's gradient is the exact one. Where m is ±inf or NaN
the shift is 0, i.e. the un-rewritten expression.

Recognised shapes, inside ``log(...)`` (also ``log(sum(...))`` and ``log(mean(...))`` of a vector, where m
is also the max over the elements):
- an Add (nested Adds and a negated Add are flattened, signs kept);
- each term a product/quotient of factors, some of them ``exp(a)`` or ``exp(a)**p``: the exp factors are
  combined into one exponent (exp(a)·exp(b) → a + b, c/exp(a) → −a, exp(a)**p → p·a), the other factors
  (constants, params, anything x-dependent) stay the coefficient in their order; a unary minus is a sign;
- a term without any exp factor is c·e^0.
Anything else inside the log is left alone. The parser's IR (and its shape rules) is not changed: this pass
builds a new tree that only `compiler.py` sees.
"""

from __future__ import annotations

from dataclasses import dataclass, fields, replace

from inference_core.expression import ir

_REDUCTIONS = ("sum", "mean")  # log of these is rewritten; Σ c e^{a−m} keeps their meaning


@dataclass
class _Term:
    """±(Π coefficient factors)·exp(Σ ±exponents); `factors`: (node, divide), `exponents`: (node, negate)."""

    negative: bool
    factors: list[tuple[ir.Node, bool]]
    exponents: list[tuple[ir.Node, bool]]


def stabilize(node: ir.Node) -> ir.Node:
    """Rewrite every ``log`` of a sum with exp factors (bottom-up) into an `ir.ShiftedLogSum`."""
    changes = {}
    for field in fields(node):
        value = getattr(node, field.name)
        if isinstance(value, ir.Node):
            changes[field.name] = stabilize(value)
        elif isinstance(value, tuple) and value and all(isinstance(v, ir.Node) for v in value):
            changes[field.name] = tuple(stabilize(v) for v in value)
    if changes:
        node = replace(node, **changes)
    if isinstance(node, ir.Call) and node.name == "log":
        return _rewrite_log(node.args[0], node.shape) or node
    return node


def _rewrite_log(argument: ir.Node, shape: ir.Shape) -> ir.ShiftedLogSum | None:
    reduction, inner = None, argument
    if isinstance(argument, ir.Call) and argument.name in _REDUCTIONS:
        reduction, inner = argument.name, argument.args[0]
    terms = _split_sum(inner, False)
    if not any(term.exponents for term in terms):
        return None
    return ir.ShiftedLogSum(
        coefficients=tuple(_product(term.factors) for term in terms),
        exponents=tuple(_exponent(term.exponents) for term in terms),
        negate=tuple(term.negative for term in terms),
        reduction=reduction,
        terms_shape=inner.shape,
        shape=shape,
    )


def _split_sum(node: ir.Node, negative: bool) -> list[_Term]:
    if isinstance(node, ir.Add):
        terms: list[_Term] = []
        for term, subtract in zip(node.terms, node.negate, strict=True):
            terms += _split_sum(term, negative != subtract)
        return terms
    if isinstance(node, ir.Neg) and isinstance(node.operand, ir.Add):
        return _split_sum(node.operand, not negative)
    term = _split_term(node)
    term.negative = term.negative != negative
    return [term]


def _is_exp(node: ir.Node) -> bool:
    return isinstance(node, ir.Call) and node.name == "exp"


def _split_term(node: ir.Node) -> _Term:
    """A product's exp factors split from the rest; a node with no exp factor is returned whole."""
    if _is_exp(node):
        return _Term(False, [], [(node.args[0], False)])
    if isinstance(node, ir.Pow) and _is_exp(node.base):
        exponent = node.base.args[0]
        scaled = ir.Mul((ir.Const(node.exponent), exponent), (False, False), exponent.shape)
        return _Term(False, [], [(scaled, False)])
    if isinstance(node, ir.Neg):
        inner = _split_term(node.operand)
        if inner.exponents:
            return _Term(not inner.negative, inner.factors, inner.exponents)
    elif isinstance(node, ir.Mul):
        negative, factors, exponents = False, [], []
        for factor, divide in zip(node.factors, node.divide, strict=True):
            part = _split_term(factor)
            negative = negative != part.negative  # 1/(−u) = −(1/u): the sign is the same either way
            factors += [(f, d != divide) for f, d in part.factors]
            exponents += [(a, n != divide) for a, n in part.exponents]  # c / e^a = c·e^{−a}
        if exponents:
            return _Term(negative, factors, exponents)
    return _Term(False, [(node, False)], [])


def _shape_of(nodes: tuple[ir.Node, ...]) -> ir.Shape:
    """The broadcast shape of operands that passed the parser's rules: the one of highest rank."""
    return max((n.shape for n in nodes), key=len, default=())


def _product(factors: list[tuple[ir.Node, bool]]) -> ir.Node | None:
    if not factors:
        return None
    if len(factors) == 1 and not factors[0][1]:
        return factors[0][0]
    if factors[0][1]:  # Mul's first factor is never a divisor: 1 / d
        factors = [(ir.Const(1.0), False), *factors]
    nodes = tuple(node for node, _ in factors)
    return ir.Mul(nodes, tuple(divide for _, divide in factors), _shape_of(nodes))


def _exponent(exponents: list[tuple[ir.Node, bool]]) -> ir.Node | None:
    if not exponents:
        return None
    nodes = [node for node, _ in exponents]
    negate = [flag for _, flag in exponents]
    if negate[0]:  # Add's first term is never subtracted
        nodes[0], negate[0] = ir.Neg(nodes[0], nodes[0].shape), False
    if len(nodes) == 1:
        return nodes[0]
    return ir.Add(tuple(nodes), tuple(negate), _shape_of(tuple(nodes)))
