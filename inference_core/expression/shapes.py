"""Shape rules of the matrix functions and the memory accounting of intermediate values (torch-free).

The parser calls `linalg_shape` for each ``linalg`` function (functions.py describes the rules) and
`value_cost` for every computed node, so that the size of everything an expression evaluates is known,
and capped, before any work: MAX_VALUE_ELEMENTS numbers in any one intermediate value and
MAX_TOTAL_ELEMENTS in all of them together, per particle (float64: 32 MiB and 256 MiB). A 2048×2048 kernel
matrix is one value at the cap; a 2,000,000-row data column (the upload cap) fits too.
"""

from __future__ import annotations

import math

from inference_core.expression import ir

MAX_VALUE_ELEMENTS = 2**22  # numbers in one intermediate value, per particle (a 2048x2048 matrix)
MAX_TOTAL_ELEMENTS = 2**25  # numbers in all intermediate values together, per particle


class ShapeError(ValueError):
    """A shape rule is broken; the parser adds the position."""


def describe(shape: ir.Shape) -> str:
    if shape == ():
        return "a scalar"
    if len(shape) == 1:
        return f"a vector of length {shape[0]}"
    return f"a {shape[0]}x{shape[1]} matrix"


def _square(name: str, shape: ir.Shape, what: str = "") -> int:
    if len(shape) != 2 or shape[0] != shape[1]:
        raise ShapeError(f"{name}() needs a square matrix{what}, got {describe(shape)}")
    return shape[0]


def linalg_shape(name: str, shapes: list[ir.Shape]) -> ir.Shape:
    """The result shape of a ``linalg`` function (not eye, whose argument is a literal), or ShapeError."""
    if name == "sqdist":
        a, b = shapes
        if len(a) == 1 and len(b) == 1:
            return (a[0], b[0])
        if len(a) == 2 and len(b) == 2 and a[1] == b[1]:
            return (a[0], b[0])
        raise ShapeError(
            f"sqdist() needs two vectors, or two matrices with the same number of columns, got "
            f"{describe(a)} and {describe(b)}"
        )
    if name == "diag":
        (a,) = shapes
        if len(a) == 1:
            return (a[0], a[0])
        if len(a) == 2 and a[0] == a[1]:
            return (a[0],)
        raise ShapeError(f"diag() needs a vector or a square matrix, got {describe(a)}")
    if name == "cholesky":
        _square(name, shapes[0])
        return shapes[0]
    if name == "logdet":
        _square(name, shapes[0])
        return ()
    if name == "trisolve":
        n = _square(name, shapes[0], " L as its first argument")
        b = shapes[1]
        if b == (n,) or (len(b) == 2 and b[0] == n):
            return b
        raise ShapeError(
            f"trisolve(L, b) needs b of length {n} or an {n}-row matrix (L is {n}x{n}), got {describe(b)}"
        )
    if name == "log_mvnormal":
        y, mean, cov = shapes
        n = _square(name, cov, " cov as its third argument")
        if y != (n,):
            raise ShapeError(
                f"log_mvnormal(y, mean, cov) needs y of length {n} (cov is {n}x{n}), got {describe(y)}"
            )
        if mean not in ((), (n,)):
            raise ShapeError(
                f"log_mvnormal(y, mean, cov) needs mean a scalar or of length {n}, got {describe(mean)}"
            )
        return ()
    raise ShapeError(f"{name}() is not a matrix function")


def value_cost(node: ir.Node) -> int:
    """Numbers a computed node holds per particle while evaluated, its scratch included (an upper estimate of
    what autograd keeps): n-ary + and * keep a running value per operand, factorisations a copy or two."""
    size = math.prod(node.shape)
    if isinstance(node, ir.Add):
        return size * max(1, len(node.terms) - 1)
    if isinstance(node, ir.Mul):
        return size * max(1, len(node.factors) - 1)
    if not isinstance(node, ir.Call) or node.name not in _SCRATCH:
        return size
    scratch, operand = _SCRATCH[node.name]
    return size + scratch * math.prod(node.args[operand].shape)


# Scratch of the matrix functions: (copies, of which argument): the squared terms of sqdist; the symmetric
# part of cholesky's argument, and its factor for logdet and log_mvnormal (y − mean and the solve are small);
# for trisolve, L where torch broadcasts it over the particles.
_SCRATCH = {
    "sqdist": (1, 0), "cholesky": (1, 0), "logdet": (2, 0), "trisolve": (1, 0), "log_mvnormal": (3, 2)
}
