"""Immutable intermediate representation of a parsed expression (torch-free).

Every numeric node carries its static `shape` per particle: ``()`` for a scalar, ``(n,)`` for a vector of
length n, ``(r, c)`` for a matrix (a param, or computed: elementwise, ``@`` and the ``linalg`` functions).
Boolean nodes (`Compare`, `Logical`, `Not`) only appear as the condition of ``where``.
Chains of + / - and of * / / are flattened into n-ary `Add` / `Mul` nodes (evaluated left to right, as
Python would), so long sums do not make deep trees.
"""

from __future__ import annotations

from dataclasses import dataclass

Shape = tuple[int, ...]


class Node:
    """Base class of IR nodes."""

    __slots__ = ()
    shape: Shape


@dataclass(frozen=True, slots=True)
class Const(Node):
    value: float
    shape: Shape = ()


@dataclass(frozen=True, slots=True)
class Input(Node):
    """The particle x (a vector of length `dim`)."""

    shape: Shape


@dataclass(frozen=True, slots=True)
class Param(Node):
    name: str
    shape: Shape


@dataclass(frozen=True, slots=True)
class Index(Node):
    """operand[i] (vector → scalar, matrix → row) or operand[i, j] (matrix → scalar); indices are >= 0."""

    operand: Node
    indices: tuple[int, ...]
    shape: Shape


@dataclass(frozen=True, slots=True)
class Slice(Node):
    """operand[start:stop:step] with a positive step, then reversed if `reverse` (a negative-step slice)."""

    operand: Node
    start: int
    stop: int
    step: int
    reverse: bool
    shape: Shape


@dataclass(frozen=True, slots=True)
class Add(Node):
    """terms[0] ± terms[1] ± ... left to right; `negate[i]` means subtract term i (negate[0] is False)."""

    terms: tuple[Node, ...]
    negate: tuple[bool, ...]
    shape: Shape


@dataclass(frozen=True, slots=True)
class Mul(Node):
    """factors[0] (* or /) factors[1] ... left to right; `divide[i]` means divide by factor i."""

    factors: tuple[Node, ...]
    divide: tuple[bool, ...]
    shape: Shape


@dataclass(frozen=True, slots=True)
class Neg(Node):
    operand: Node
    shape: Shape


@dataclass(frozen=True, slots=True)
class Pow(Node):
    """base ** exponent, the exponent a literal with |exponent| <= MAX_EXPONENT."""

    base: Node
    exponent: float
    shape: Shape


@dataclass(frozen=True, slots=True)
class MatMul(Node):
    """matrix @ vector, vector @ matrix, or vector @ vector (a dot product)."""

    left: Node
    right: Node
    shape: Shape


@dataclass(frozen=True, slots=True)
class Call(Node):
    """A function of functions.py by name; ``eye(n)`` has no args (n is its shape)."""

    name: str
    args: tuple[Node, ...]
    shape: Shape


@dataclass(frozen=True, slots=True)
class Compare(Node):
    """operands[0] ops[0] operands[1] ops[1] ... (a chain means the AND of the adjacent pairs)."""

    ops: tuple[str, ...]  # each one of "<", "<=", ">", ">=", "==", "!="
    operands: tuple[Node, ...]
    shape: Shape


@dataclass(frozen=True, slots=True)
class Logical(Node):
    op: str  # "and" | "or"
    operands: tuple[Node, ...]
    shape: Shape


@dataclass(frozen=True, slots=True)
class Not(Node):
    operand: Node
    shape: Shape


@dataclass(frozen=True, slots=True)
class ShiftedLogSum(Node):
    """log(R(Σ_i ±c_i·exp(a_i))) evaluated as m + log(R(Σ_i ±c_i·exp(a_i − m))), m = max_i a_i (detached).

    Never produced by the parser: `stabilize.py` rewrites ``log`` of a sum with ``exp`` factors into it.
    `coefficients[i]` None means c_i = 1, `exponents[i]` None means a_i = 0; `negate[i]` subtracts term i.
    `reduction` is None (elementwise, `terms_shape == shape`) or "sum"/"mean" over the vector `terms_shape`
    (then `shape == ()`), in which case m is also the max over the vector's elements.
    """

    coefficients: tuple[Node | None, ...]
    exponents: tuple[Node | None, ...]
    negate: tuple[bool, ...]
    reduction: str | None
    terms_shape: Shape
    shape: Shape


BOOLEAN_NODES = (Compare, Logical, Not)
