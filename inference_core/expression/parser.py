"""Parse and check an expression-language log-density into the immutable IR (torch-free).

The source is parsed with Python's own parser (`ast.parse(..., mode="eval")`) and the resulting tree is
walked against an allow-list: anything not explicitly handled below is rejected with a `ValueError` that
names the construct and its position. Nothing is ever evaluated by Python: the IR is compiled to torch
ops by `compiler.py`. Why an allow-list and no sanitising: see docs/implementation-notes.md,
"Safe expressions" (numexpr CVE-2023-39631, the asteval escape, sympify's eval).

Defences, in order:
1. type and length checks on the raw string before the parser sees it (`MAX_SOURCE_LENGTH`, ASCII only);
2. `ast.parse` with its own failures (SyntaxError, RecursionError, MemoryError, ...) turned into ValueError;
3. an iterative pre-pass that caps the node count and the nesting depth before any recursive walk;
4. the recursive allow-list walk, which also infers every node's shape, bounds-checks every index against
   `dim` and the params' shapes, caps the size of every intermediate value and of all of them together
   (shapes.py: MAX_VALUE_ELEMENTS, MAX_TOTAL_ELEMENTS per particle), and requires a scalar result per particle.
"""

from __future__ import annotations

import ast
import keyword
import math
from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import NoReturn

from inference_core.expression import ir
from inference_core.expression.functions import CONSTANTS, FUNCTIONS
from inference_core.expression.shapes import (
    MAX_TOTAL_ELEMENTS,
    MAX_VALUE_ELEMENTS,
    ShapeError,
    linalg_shape,
    value_cost,
)
from inference_core.expression.shapes import describe as _describe

MAX_SOURCE_LENGTH = 10_000  # characters, checked before parsing
MAX_NODES = 5_000  # Python AST nodes
MAX_DEPTH = 64  # nesting depth, with + - chains and * / chains counted as one level
MAX_EXPONENT = 16.0  # |p| for a ** p, p a number literal
MAX_PARAMS = 64
MAX_PARAM_NAME_LENGTH = 64
MAX_PARAM_ELEMENTS = 250_000  # all params together
PARSE_FILENAME = "<parvis-expression>"  # the filename ast.parse reports (and its audit "compile" event)

RESERVED_NAMES = frozenset({"x", *CONSTANTS, *FUNCTIONS})

_BINOP_SYMBOLS: dict[type, str] = {
    ast.Add: "+",
    ast.Sub: "-",
    ast.Mult: "*",
    ast.Div: "/",
    ast.Pow: "**",
    ast.MatMult: "@",
    ast.Mod: "%",
    ast.FloorDiv: "//",
    ast.LShift: "<<",
    ast.RShift: ">>",
    ast.BitAnd: "&",
    ast.BitOr: "|",
    ast.BitXor: "^",
}
_COMPARE_SYMBOLS: dict[type, str] = {
    ast.Lt: "<",
    ast.LtE: "<=",
    ast.Gt: ">",
    ast.GtE: ">=",
    ast.Eq: "==",
    ast.NotEq: "!=",
}
# Rejected node types with a specific message; anything else gets a generic one.
_FORBIDDEN: dict[type, str] = {
    ast.Attribute: "attribute access is not allowed",
    ast.Lambda: "lambda is not allowed",
    ast.ListComp: "comprehensions are not allowed",
    ast.SetComp: "comprehensions are not allowed",
    ast.DictComp: "comprehensions are not allowed",
    ast.GeneratorExp: "comprehensions are not allowed",
    ast.JoinedStr: "f-strings are not allowed",
    ast.FormattedValue: "f-strings are not allowed",
    ast.NamedExpr: "assignment expressions (:=) are not allowed",
    ast.IfExp: "conditional expressions (a if c else b) are not allowed; use where(cond, a, b)",
    ast.List: "list literals are not allowed",
    ast.Tuple: "tuples are not allowed",
    ast.Set: "set literals are not allowed",
    ast.Dict: "dict literals are not allowed",
    ast.Starred: "* unpacking is not allowed",
    ast.Await: "await is not allowed",
    ast.Yield: "yield is not allowed",
    ast.YieldFrom: "yield is not allowed",
    ast.Slice: "slices are only allowed inside x[...] or a param's [...]",
    ast.Compare: "comparisons are only allowed as the condition of where(cond, a, b)",
    ast.BoolOp: "and/or are only allowed in the condition of where(cond, a, b)",
}


class ExpressionError(ValueError):
    """A rejected expression; the message names the construct and (when known) its line and 1-based column."""

    def __init__(self, message: str, line: int | None = None, col: int | None = None):
        super().__init__(message)
        self.line = line
        self.col = col


@dataclass(frozen=True)
class Expression:
    """A checked expression: the IR root (a scalar per particle), `dim`, the params' shapes, and `footprint`,
    the numbers its intermediate values hold per particle (shapes.value_cost; at most MAX_TOTAL_ELEMENTS)."""

    source: str
    dim: int
    root: ir.Node
    param_shapes: Mapping[str, ir.Shape]
    footprint: int = 0


def check_param_name(name: object) -> str:
    """A param name must be a plain ASCII identifier, not reserved, no leading underscore."""
    if not isinstance(name, str):
        raise ValueError("param names must be strings")
    shown = repr(name[:MAX_PARAM_NAME_LENGTH])
    if not name.isascii() or not name.isidentifier() or keyword.iskeyword(name):
        raise ValueError(f"param name {shown} is not a valid identifier (ASCII letters, digits, _)")
    if len(name) > MAX_PARAM_NAME_LENGTH:
        raise ValueError(f"param name {shown}... is longer than {MAX_PARAM_NAME_LENGTH} characters")
    if name.startswith("_"):
        raise ValueError(f"param name {shown} must not start with '_'")
    if name in RESERVED_NAMES:
        raise ValueError(f"param name {shown} is reserved (x, a constant or a function name)")
    return name


def parse_expression(
    source: object, dim: int, param_shapes: Mapping[str, ir.Shape] | None = None
) -> Expression:
    """Parse `source` (the log-density of one particle x ∈ R^dim) into checked IR, or raise ValueError."""
    if isinstance(dim, bool) or not isinstance(dim, int) or dim < 1:
        raise ValueError("dim must be an integer >= 1")
    shapes = dict(param_shapes or {})
    if len(shapes) > MAX_PARAMS:
        raise ValueError(f"at most {MAX_PARAMS} params are allowed, got {len(shapes)}")
    for name, shape in shapes.items():
        check_param_name(name)
        if len(shape) > 2 or any(isinstance(n, bool) or not isinstance(n, int) or n < 1 for n in shape):
            raise ValueError(
                f"param {name!r}: a scalar, a non-empty vector or a non-empty matrix is required"
            )
    # Length and character checks come first: the parser must never see a huge or odd string.
    if not isinstance(source, str):
        raise ValueError("the expression must be a string")
    if len(source) > MAX_SOURCE_LENGTH:
        raise ValueError(f"the expression is longer than {MAX_SOURCE_LENGTH} characters ({len(source)})")
    if not source.strip():
        raise ValueError("the expression is empty")
    if not source.isascii():
        raise ValueError("the expression may only contain ASCII characters")
    if "\x00" in source:
        raise ValueError("the expression contains a NUL character")
    try:
        tree = ast.parse(source, filename=PARSE_FILENAME, mode="eval")
    except SyntaxError as exc:
        raise ExpressionError(_syntax_message(exc), exc.lineno, exc.offset) from None
    except (RecursionError, MemoryError):
        raise ExpressionError("the expression is nested too deeply (or too long) for the parser") from None
    except (ValueError, OverflowError) as exc:  # e.g. an integer literal with too many digits
        raise ExpressionError(f"invalid expression: {str(exc)[:200]}") from None
    multiline = "\n" in source or "\r" in source
    _check_size(tree.body, multiline)
    walker = _Walker(dim, shapes, multiline)
    root = walker.numeric(tree.body)
    if root.shape != ():
        walker.fail(
            tree.body,
            f"the expression must give one number per particle but gives {_describe(root.shape)}; "
            "reduce it with sum(...), mean(...), logsumexp(...), ...",
        )
    return Expression(
        source=source, dim=dim, root=root, param_shapes=MappingProxyType(shapes), footprint=walker.footprint
    )


def _syntax_message(exc: SyntaxError) -> str:
    where = f"line {exc.lineno}, col {exc.offset}: " if exc.lineno and exc.offset else ""
    return f"{where}syntax error: {exc.msg}"


def _chain_family(node: ast.AST) -> int:
    """0: not a chain; 1: + or -; 2: * or / (these chains are flattened, so they cost no depth)."""
    if isinstance(node, ast.BinOp):
        if isinstance(node.op, ast.Add | ast.Sub):
            return 1
        if isinstance(node.op, ast.Mult | ast.Div):
            return 2
    return 0


def _check_size(root: ast.AST, multiline: bool) -> None:
    """Cap node count and nesting depth with an explicit stack (no recursion on untrusted depth)."""
    count = 0
    stack: list[tuple[ast.AST, int]] = [(root, 1)]
    while stack:
        node, depth = stack.pop()
        count += 1
        if count > MAX_NODES:
            raise ExpressionError(f"the expression has more than {MAX_NODES} syntax nodes")
        if depth > MAX_DEPTH:
            line, col = getattr(node, "lineno", None), getattr(node, "col_offset", None)
            raise ExpressionError(
                f"{_position(line, col, multiline)}the expression is nested more than {MAX_DEPTH} levels deep",
                line,
                None if col is None else col + 1,
            )
        family = _chain_family(node)
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.expr_context | ast.operator | ast.unaryop | ast.cmpop | ast.boolop):
                continue
            # the left operand of a + - (or * /) chain continues the chain: flattened, so no extra depth
            same_chain = family != 0 and isinstance(node, ast.BinOp) and child is node.left
            same_chain = same_chain and _chain_family(child) == family
            stack.append((child, depth if same_chain else depth + 1))


def _position(line: int | None, col: int | None, multiline: bool = False) -> str:
    if col is None:
        return ""
    if multiline and line is not None:
        return f"line {line}, col {col + 1}: "
    return f"col {col + 1}: "


def _number_literal(node: ast.AST) -> float | int | None:
    """The value of `5`, `2.5`, `-3`, `+1e-3` (no bools, no complex), or None if node is not one."""
    sign = 1
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub | ast.UAdd):
        sign = -1 if isinstance(node.op, ast.USub) else 1
        node = node.operand
    if isinstance(node, ast.Constant) and type(node.value) in (int, float):
        return sign * node.value
    return None


class _Walker:
    """The allow-list walk: ast → IR with shapes. Recursion depth is bounded by `_check_size`."""

    def __init__(self, dim: int, param_shapes: dict[str, ir.Shape], multiline: bool):
        self.dim = dim
        self.param_shapes = param_shapes
        self.multiline = multiline
        self.footprint = 0  # numbers per particle held by the intermediate values so far (value_cost)
        self._counted: set[int] = set()  # ids of the nodes in `footprint` (all alive in the tree being built)

    def fail(self, node: ast.AST, message: str) -> NoReturn:
        line, col = getattr(node, "lineno", None), getattr(node, "col_offset", None)
        raise ExpressionError(
            f"{_position(line, col, self.multiline)}{message}", line, None if col is None else col + 1
        )

    def _account(self, node: ast.AST, value: ir.Node) -> ir.Node:
        """Cap one computed value and the running total (leaves are the params' and x's own memory)."""
        if isinstance(value, ir.Const | ir.Param | ir.Input) or id(value) in self._counted:
            return value  # `+a` returns a's node, already counted
        self._counted.add(id(value))
        size = math.prod(value.shape)
        if size > MAX_VALUE_ELEMENTS:
            self.fail(
                node,
                f"this gives {_describe(value.shape)} ({size:,} numbers per particle), over the cap of "
                f"{MAX_VALUE_ELEMENTS:,} numbers for one intermediate value",
            )
        self.footprint += value_cost(value)
        if self.footprint > MAX_TOTAL_ELEMENTS:
            self.fail(
                node,
                f"the intermediate values up to here hold {self.footprint:,} numbers per particle, over the cap "
                f"of {MAX_TOTAL_ELEMENTS:,} for the whole expression",
            )
        return value

    # --- numeric expressions -------------------------------------------------------------------------
    def numeric(self, node: ast.AST) -> ir.Node:
        return self._account(node, self._numeric(node))

    def _numeric(self, node: ast.AST) -> ir.Node:
        if isinstance(node, ast.Constant):
            return ir.Const(self._constant(node))
        if isinstance(node, ast.Name):
            return self._name(node)
        if isinstance(node, ast.UnaryOp):
            if isinstance(node.op, ast.UAdd):
                return self.numeric(node.operand)
            if isinstance(node.op, ast.USub):
                operand = self.numeric(node.operand)
                if isinstance(operand, ir.Const):
                    return ir.Const(-operand.value)
                return ir.Neg(operand, operand.shape)
            self.fail(
                node,
                f"'{'not' if isinstance(node.op, ast.Not) else '~'}' is only allowed in the "
                "condition of where(cond, a, b)",
            )
        if isinstance(node, ast.BinOp):
            return self._binop(node)
        if isinstance(node, ast.Call):
            return self._call(node)
        if isinstance(node, ast.Subscript):
            return self._subscript(node)
        message = _FORBIDDEN.get(type(node), f"{type(node).__name__} expressions are not allowed")
        self.fail(node, message)

    def _constant(self, node: ast.Constant) -> float:
        value = node.value
        if isinstance(value, str | bytes):
            self.fail(node, "strings are not allowed")
        if type(value) not in (int, float):
            self.fail(
                node, f"the literal {type(value).__name__} {str(value)[:20]} is not allowed; only numbers"
            )
        try:
            number = float(value)
        except OverflowError:
            number = math.inf
        if not math.isfinite(number):
            self.fail(node, "number literals must be finite")
        return number

    def _name(self, node: ast.Name) -> ir.Node:
        name = node.id
        if name == "x":
            return ir.Input((self.dim,))
        if name in self.param_shapes:
            return ir.Param(name, self.param_shapes[name])
        if name in CONSTANTS:
            return ir.Const(CONSTANTS[name])
        if name in FUNCTIONS:
            self.fail(node, f"{name} is a function; call it as {name}(...)")
        if name.startswith("_"):
            self.fail(node, f"names starting with '_' are not allowed ({name[:40]!r})")
        self.fail(node, f"unknown name {name[:40]!r} (use x, a declared param, pi or e)")

    def _broadcast(self, node: ast.AST, values: list[ir.Node], what: str) -> ir.Shape:
        """numpy's rule, restricted: scalars go everywhere, vectors of one length, matrices of one shape,
        and a vector meets a matrix as each of its rows (its length must be the number of columns)."""
        lengths = {value.shape[0] for value in values if len(value.shape) == 1}
        matrices = {value.shape for value in values if len(value.shape) == 2}
        if len(matrices) > 1:
            shown = " and ".join(_describe(shape) for shape in sorted(matrices))
            self.fail(node, f"shape mismatch in {what}: {shown}")
        if matrices:
            (shape,) = matrices
            if lengths - {shape[1]}:
                length = min(lengths - {shape[1]})
                self.fail(
                    node,
                    f"shape mismatch in {what}: {_describe((length,))} and {_describe(shape)} (a vector "
                    "meets a matrix as each of its rows, so its length must be the number of columns)",
                )
            return shape
        if len(lengths) > 1:
            shown = " and ".join(_describe((n,)) for n in sorted(lengths))
            self.fail(node, f"shape mismatch in {what}: {shown}")
        return (lengths.pop(),) if lengths else ()

    def _binop(self, node: ast.BinOp) -> ir.Node:
        family = _chain_family(node)
        if family:
            # Flatten the left spine iteratively: a - b + c → Add([a, b, c], [F, T, F]).
            operands: list[ast.AST] = []
            ops: list[ast.operator] = []
            current: ast.AST = node
            while isinstance(current, ast.BinOp) and _chain_family(current) == family:
                operands.append(current.right)
                ops.append(current.op)
                current = current.left
            operands.append(current)
            operands.reverse()
            ops.reverse()
            values = [self.numeric(operand) for operand in operands]
            inverted = (False, *(isinstance(op, ast.Sub | ast.Div) for op in ops))
            shape = self._broadcast(node, values, "+/-" if family == 1 else "*//")
            if family == 1:
                return ir.Add(tuple(values), inverted, shape)
            return ir.Mul(tuple(values), inverted, shape)
        if isinstance(node.op, ast.Pow):
            exponent = _number_literal(node.right)
            if exponent is None:
                self.fail(
                    node.right,
                    f"the exponent of ** must be a number literal with |p| <= {MAX_EXPONENT:g}; "
                    "write exp(b * log(a)) for a general power",
                )
            if not math.isfinite(float(exponent)) or abs(exponent) > MAX_EXPONENT:
                self.fail(
                    node.right, f"exponent {str(exponent)[:30]} is out of range (|p| <= {MAX_EXPONENT:g})"
                )
            base = self.numeric(node.left)
            return ir.Pow(base, float(exponent), base.shape)
        if isinstance(node.op, ast.MatMult):
            return self._matmul(node)
        symbol = _BINOP_SYMBOLS.get(type(node.op), type(node.op).__name__)
        if isinstance(node.op, ast.BitAnd | ast.BitOr):
            self.fail(
                node,
                f"'{symbol}' is only allowed in the condition of where(cond, a, b), between "
                "parenthesised comparisons: (a > b) & (c < d)",
            )
        self.fail(node, f"operator '{symbol}' is not allowed")

    def _matmul(self, node: ast.BinOp) -> ir.Node:
        left, right = self.numeric(node.left), self.numeric(node.right)
        ls, rs = left.shape, right.shape
        if len(ls) == 2 and len(rs) == 1 and ls[1] == rs[0]:
            return ir.MatMul(left, right, (ls[0],))
        if len(ls) == 1 and len(rs) == 2 and ls[0] == rs[0]:
            return ir.MatMul(left, right, (rs[1],))
        if len(ls) == 1 and len(rs) == 1 and ls[0] == rs[0]:
            return ir.MatMul(left, right, ())
        self.fail(
            node,
            f"@ cannot combine {_describe(ls)} with {_describe(rs)} "
            "(allowed: matrix @ vector, vector @ matrix, vector @ vector of matching lengths)",
        )

    def _call(self, node: ast.Call) -> ir.Node:
        if not isinstance(node.func, ast.Name):
            if isinstance(node.func, ast.Attribute):
                self.fail(node.func, "attribute access is not allowed")
            self.fail(node, "only functions from the fixed list may be called, by name")
        name = node.func.id
        spec = FUNCTIONS.get(name)
        if spec is None:
            if name == "x" or name in self.param_shapes or name in CONSTANTS:
                self.fail(node, f"{name!r} is not a function")
            self.fail(
                node, f"calling {name[:40]!r} is not allowed; allowed functions: {', '.join(FUNCTIONS)}"
            )
        if node.keywords:
            self.fail(node.keywords[0], f"keyword arguments are not allowed (in {name}(...))")
        for arg in node.args:
            if isinstance(arg, ast.Starred):
                self.fail(arg, "* unpacking is not allowed")
        if len(node.args) != spec.arity:
            hint = ""
            if name in ("max", "min"):
                hint = f"; {name}(v) reduces a vector, use {name}imum(a, b) elementwise"
            self.fail(
                node,
                f"{name} takes {spec.arity} argument{'s' if spec.arity != 1 else ''}, "
                f"got {len(node.args)}{hint}",
            )
        if spec.kind == "linalg":
            return self._linalg(node, name)
        if spec.kind == "where":
            cond = self.condition(node.args[0])
            a, b = self.numeric(node.args[1]), self.numeric(node.args[2])
            shape = self._broadcast(node, [cond, a, b], "where()")
            return ir.Call(name, (cond, a, b), shape)
        args = tuple(self.numeric(arg) for arg in node.args)
        if spec.kind == "elementwise":
            return ir.Call(name, args, self._broadcast(node, list(args), f"{name}()"))
        if spec.kind == "reduction":
            if len(args[0].shape) != 1:
                self.fail(node, f"{name}() reduces a vector but got {_describe(args[0].shape)}")
            return ir.Call(name, args, ())
        # dot
        if any(len(arg.shape) != 1 for arg in args) or args[0].shape != args[1].shape:
            self.fail(
                node,
                f"dot() needs two vectors of equal length, got {_describe(args[0].shape)} "
                f"and {_describe(args[1].shape)}",
            )
        return ir.Call(name, args, ())

    def _linalg(self, node: ast.Call, name: str) -> ir.Node:
        if name == "eye":
            n = _number_literal(node.args[0])
            if not isinstance(n, int) or n < 1:
                self.fail(node.args[0], "eye(n) needs a positive integer literal n")
            if n > MAX_VALUE_ELEMENTS:  # keeps n * n a small int; the cap itself is checked by _account
                self.fail(node, f"eye({str(n)[:30]}) is over the cap of {MAX_VALUE_ELEMENTS:,} numbers")
            return ir.Call(name, (), (n, n))
        args = tuple(self.numeric(arg) for arg in node.args)
        try:
            shape = linalg_shape(name, [arg.shape for arg in args])
        except ShapeError as exc:
            self.fail(node, str(exc))
        return ir.Call(name, args, shape)

    def _subscript(self, node: ast.Subscript) -> ir.Node:
        if not isinstance(node.value, ast.Name) or not (
            node.value.id == "x" or node.value.id in self.param_shapes
        ):
            self.fail(node, "only x and params can be subscripted")
        operand = self.numeric(node.value)
        shape = operand.shape
        label = "x" if isinstance(operand, ir.Input) else f"param {node.value.id!r}"  # type: ignore[union-attr]
        if shape == ():
            self.fail(node, f"{label} is a scalar and cannot be subscripted")
        index = node.slice
        if isinstance(index, ast.Slice):
            if len(shape) != 1:
                self.fail(index, f"slices are only allowed on vectors; {label} is {_describe(shape)}")
            return self._slice(index, operand, label)
        if isinstance(index, ast.Tuple):
            if len(shape) != 2 or len(index.elts) != 2:
                self.fail(index, f"{label}[i, j] needs a matrix and two indices")
            i = self._index(index.elts[0], shape[0], label)
            j = self._index(index.elts[1], shape[1], label)
            return ir.Index(operand, (i, j), ())
        i = self._index(index, shape[0], label)
        return ir.Index(operand, (i,), shape[1:])

    def _index(self, node: ast.AST, length: int, label: str) -> int:
        value = _number_literal(node)
        if not isinstance(value, int):
            self.fail(node, f"indices of {label} must be integer literals")
        if not -length <= value < length:
            self.fail(node, f"index {str(value)[:30]} is out of range for {label} of length {length}")
        return value % length

    def _slice(self, node: ast.Slice, operand: ir.Node, label: str) -> ir.Node:
        bounds: list[int | None] = []
        for part in (node.lower, node.upper, node.step):
            if part is None:
                bounds.append(None)
                continue
            value = _number_literal(part)
            if not isinstance(value, int):
                self.fail(part, f"slice bounds of {label} must be integer literals")
            bounds.append(value)  # type: ignore[arg-type]
        if bounds[2] == 0:
            self.fail(node, "slice step must not be zero")
        # range() slicing is exact and O(1) even for absurd literals.
        picked = range(operand.shape[0])[slice(*bounds)]
        if len(picked) == 0:
            self.fail(node, f"the slice of {label} is empty")
        step = abs(picked.step)
        first, last = min(picked[0], picked[-1]), max(picked[0], picked[-1])
        reverse = picked.step < 0 and len(picked) > 1
        return ir.Slice(operand, first, last + 1, step, reverse, (len(picked),))

    # --- conditions (only inside where) --------------------------------------------------------------
    def condition(self, node: ast.AST) -> ir.Node:
        return self._account(node, self._condition(node))

    def _condition(self, node: ast.AST) -> ir.Node:
        if isinstance(node, ast.Compare):
            ops = []
            for op in node.ops:
                symbol = _COMPARE_SYMBOLS.get(type(op))
                if symbol is None:
                    self.fail(
                        node,
                        f"comparison operator {type(op).__name__} is not allowed (use <, <=, >, >=, ==, !=)",
                    )
                ops.append(symbol)
            operands = [self.numeric(node.left), *(self.numeric(c) for c in node.comparators)]
            shape = self._broadcast(node, operands, "comparison")
            return ir.Compare(tuple(ops), tuple(operands), shape)  # type: ignore[arg-type]
        if isinstance(node, ast.BoolOp):
            parts = [self.condition(value) for value in node.values]
            op = "and" if isinstance(node.op, ast.And) else "or"
            return ir.Logical(op, tuple(parts), self._broadcast(node, parts, op))
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.BitAnd | ast.BitOr):
            parts = [self.condition(node.left), self.condition(node.right)]
            op = "and" if isinstance(node.op, ast.BitAnd) else "or"
            return ir.Logical(op, tuple(parts), self._broadcast(node, parts, op))
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.Not | ast.Invert):
            inner = self.condition(node.operand)
            return ir.Not(inner, inner.shape)
        self.fail(
            node,
            "the condition of where() must be a comparison such as x[0] > 0 "
            "(combined with & | ~ or and/or/not, comparisons parenthesised)",
        )
