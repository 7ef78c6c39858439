"""The safe expression language for user log-densities (issue #4; docs/architecture.md, "Targets").

`parser` (torch-free) turns a source string into checked, immutable IR; `compiler` (torch) turns the IR into
a closure of torch ops. Nothing is ever passed to `eval`/`exec`/`compile`. Only the torch-free parts are
imported here, so the API can validate specs without loading torch.

Language (the log-density of one particle x ∈ R^dim, up to a constant; the result must be one number):

    numbers      finite int/float literals (1, 2.5, 1e-3); the constants pi and e
    x            the particle, a vector of length dim
    x[i]         an element; i an integer literal, negative allowed, checked against dim
    x[a:b:c]     a slice with integer-literal bounds (Python semantics; negative steps allowed; not empty)
    params       by name: scalars, vectors (p[i], p[a:b:c]) and matrices (A[i] is row i, A[i, j]);
                 names are ASCII identifiers, not x / pi / e / a function name, no leading underscore
    + - * /      elementwise; a scalar broadcasts against a vector or a matrix, vectors must have equal
                 lengths, matrices equal shapes, and a vector meets an r x c matrix as each row (length c)
    -a, +a       unary minus and plus
    a ** p       p a number literal (optionally negated) with |p| <= 16; write exp(b * log(a)) otherwise
    u @ v        matrix @ vector, vector @ matrix, vector @ vector (dot product); matrices may be computed
    sqdist eye diag cholesky trisolve logdet log_mvnormal
                 matrices for Gaussian processes (functions.py, kind ``linalg``); a matrix that is not
                 positive definite gives NaN, never an exception
    f(a, ...)    a function from FUNCTIONS, by name, positional arguments only, fixed arity
    where(c, a, b)   c: comparisons < <= > >= == != (chains like 0 < x[0] < 1 allowed), combined with
                 & | ~ or and / or / not; comparisons appear nowhere else. Both a and b are evaluated.

Shapes are checked at parse time (scalar, vector of known length, matrix); reductions (sum, mean, prod,
max, min, logsumexp, norm, dot) reduce a vector to a scalar. Caps: MAX_SOURCE_LENGTH characters (checked
before parsing), ASCII only, MAX_NODES syntax nodes, MAX_DEPTH nesting levels (a chain of + - or of * /
counts as one level), MAX_PARAMS params with MAX_PARAM_ELEMENTS numbers in all (written inline; a
param taken from a data set is bounded by the data set's caps), MAX_VALUE_ELEMENTS numbers in any one
intermediate value and MAX_TOTAL_ELEMENTS in all of them, per particle (shapes.py). Any other Python syntax
(attributes, other calls, keywords, strings, lambdas, comprehensions, conditionals, ...) is rejected with
a ValueError naming the construct and its line/column. NaN and ±inf at run time are not errors here.

`log` of a sum with `exp` factors (log(theta*exp(a) + (1-theta)*exp(b)), log(sum(w*exp(v))), ...) is compiled
as m + log Σ c_i e^{a_i − m}, m = max a_i: exact, and finite where the naive form under/overflows
(`stabilize.py`; `compile_expression(..., stabilize=False)` compiles the expression as written).
"""

from inference_core.expression.functions import CONSTANTS, FUNCTIONS, FunctionSpec
from inference_core.expression.parser import (
    MAX_DEPTH,
    MAX_EXPONENT,
    MAX_NODES,
    MAX_PARAM_ELEMENTS,
    MAX_PARAMS,
    MAX_SOURCE_LENGTH,
    Expression,
    ExpressionError,
    check_param_name,
    parse_expression,
)
from inference_core.expression.shapes import MAX_TOTAL_ELEMENTS, MAX_VALUE_ELEMENTS

__all__ = [
    "CONSTANTS",
    "FUNCTIONS",
    "MAX_DEPTH",
    "MAX_EXPONENT",
    "MAX_NODES",
    "MAX_PARAMS",
    "MAX_PARAM_ELEMENTS",
    "MAX_SOURCE_LENGTH",
    "MAX_TOTAL_ELEMENTS",
    "MAX_VALUE_ELEMENTS",
    "Expression",
    "ExpressionError",
    "FunctionSpec",
    "check_param_name",
    "parse_expression",
]
