"""`expression` target: a log-density written in the safe expression language (inference_core.expression).

The spec was parsed and checked when it was validated; the builder parses it again (cheap, and the builder
must not trust its caller) and compiles the IR to a closure of torch ops. Scores are autograd's.
"""

from __future__ import annotations

import torch
from torch import Tensor

from inference_core.expression.compiler import CompiledExpression, compile_expression
from inference_core.expression.parser import parse_expression
from inference_core.schemas.targets import ExpressionTargetSpec
from inference_core.targets.base import BuildContext, Target


class ExpressionTarget(Target):
    """log p(x) given by a compiled expression, up to an unknown constant (no normaliser, no reference)."""

    kind = "expression"

    def __init__(
        self,
        compiled: CompiledExpression,
        params: dict[str, Tensor],
        dtype: torch.dtype,
        device: torch.device | str,
    ):
        self.dim = compiled.expression.dim
        self.compiled = compiled
        self.params = {name: value.to(device=device, dtype=dtype) for name, value in params.items()}
        self.constants = compiled.make_constants(dtype, device)

    def log_prob(self, x: Tensor, batch: object | None = None) -> Tensor:
        return self.compiled.evaluate(x, self.params, self.constants)

    def to(
        self, device: torch.device | str | None = None, dtype: torch.dtype | None = None
    ) -> ExpressionTarget:
        self.params = {
            name: value.to(device=device, dtype=dtype or value.dtype) for name, value in self.params.items()
        }
        self.constants = tuple(
            value.to(device=device, dtype=dtype or value.dtype) for value in self.constants
        )
        return self


def build(spec: ExpressionTargetSpec, context: BuildContext) -> ExpressionTarget:
    expression = parse_expression(spec.log_prob, spec.dim, spec.param_shapes())
    params = {name: torch.tensor(value, dtype=torch.float64) for name, value in spec.params.items()}
    return ExpressionTarget(compile_expression(expression), params, context.dtype, context.device)
