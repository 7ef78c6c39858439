"""`expression` target: a log-density written in the safe expression language (inference_core.expression).

The spec was parsed and checked when it was validated (or, with params from an uploaded data set, at submit
against the data set's shape); the builder parses it again against the data it actually loaded (cheap, and
the builder must not trust its caller) and compiles the IR to a closure of torch ops. Scores are autograd's.

Particles are evaluated in chunks of at most EVAL_CHUNK_ELEMENTS // footprint rows (the footprint is what the
expression's intermediate values hold per particle, capped by the parser), so a large matrix expression (a
Gaussian process over a few thousand points) never holds more than that at once for all the particles: the
scores, which is what the particle methods ask for, are computed chunk by chunk, graph and all.
"""

from __future__ import annotations

import torch
from torch import Tensor

from inference_core import errors
from inference_core.datasets import resolve_dataset
from inference_core.datasets.columns import DatasetShape, select_columns
from inference_core.expression.compiler import CompiledExpression, compile_expression
from inference_core.expression.shapes import MAX_TOTAL_ELEMENTS
from inference_core.schemas.targets import DatasetColumns, ExpressionTargetSpec
from inference_core.targets.base import BuildContext, Target

#: Numbers of intermediate values held at once while evaluating a chunk of particles (256 MiB in float64).
EVAL_CHUNK_ELEMENTS = MAX_TOTAL_ELEMENTS


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
        self.chunk_rows = max(1, EVAL_CHUNK_ELEMENTS // max(1, compiled.expression.footprint))

    def log_prob(self, x: Tensor, batch: object | None = None) -> Tensor:
        if x.shape[0] <= self.chunk_rows:
            return self.compiled.evaluate(x, self.params, self.constants)
        parts = x.split(self.chunk_rows)
        return torch.cat([self.compiled.evaluate(part, self.params, self.constants) for part in parts])

    def _autograd_log_prob_and_score(self, x: Tensor, batch: object | None) -> tuple[Tensor, Tensor]:
        # One backward pass per chunk: the graph of a chunk is freed before the next one is built.
        if x.shape[0] <= self.chunk_rows:
            return super()._autograd_log_prob_and_score(x, batch)
        whole = super()._autograd_log_prob_and_score
        parts = [whole(part, batch) for part in x.split(self.chunk_rows)]
        return torch.cat([lp for lp, _ in parts]), torch.cat([score for _, score in parts])

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
    # Data-set params: each data set loaded once (an uploaded one through the caller's tenant-scoped loader),
    # and the expression checked against the shapes of what was loaded.
    references = {item.dataset for item in spec.params.values() if isinstance(item, DatasetColumns)}
    datasets = {reference: resolve_dataset(reference, context) for reference in sorted(references)}
    expression = spec.parse({reference: DatasetShape.of(data) for reference, data in datasets.items()})
    params = {}
    for name, value in spec.params.items():
        if isinstance(value, DatasetColumns):
            try:
                array = select_columns(datasets[value.dataset], value.column, value.columns)
            except ValueError as exc:  # parse() checked the columns already; kept for a loader's odd data
                raise errors.TargetInvalid(f"target.params: {name!r}: {exc}", loc=("target", "params", name)) from None
            params[name] = torch.from_numpy(array)
        else:
            params[name] = torch.tensor(value, dtype=torch.float64)
    return ExpressionTarget(compile_expression(expression), params, context.dtype, context.device)
