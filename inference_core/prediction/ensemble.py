"""A fixed ensemble of weight vectors (a particle job's final particles) as a predictor, and its archive.

The archive is the sampler archive's format (`samplers.archive`: a deterministic `.zip` of `config.json` +
`weights.safetensors`, never pickle, read as hostile input) with this config:

    {"format": "parvis.predictor", "format_version": 1, "method": "svgd",
     "target": {"kind": "bnn", "dim": D}, "n_draws": N,
     "layout": [{"name", "shape", "offset"}, ...],
     "model": PredictiveModelConfig (samplers.config)}

and one float32 tensor "weights" [N, D].
"""

from __future__ import annotations

from typing import IO, Any, Literal

import torch
from pydantic import Field, ValidationError, model_validator
from torch import Tensor

from inference_core.prediction.predictive import WeightPredictor
from inference_core.samplers import archive
from inference_core.samplers.config import MAX_DIM, LayoutBlock, PredictiveModelConfig, TargetSummary
from inference_core.schemas.common import StrictModel

FORMAT = "parvis.predictor"
FORMAT_VERSION = 1
WEIGHTS_TENSOR = "weights"
#: Largest ensemble one archive may hold (values; 1 GiB of float32), as the sampler's parameter cap.
MAX_VALUES = 2**28


class PredictorConfig(StrictModel):
    format: Literal["parvis.predictor"]
    format_version: Literal[1]
    method: str = Field(min_length=1, max_length=64)
    target: TargetSummary
    n_draws: int = Field(ge=1, le=MAX_DIM)
    layout: list[LayoutBlock] = Field(min_length=1, max_length=10_000)
    model: PredictiveModelConfig

    @model_validator(mode="after")
    def _consistent(self) -> PredictorConfig:
        if self.model.network is None:
            raise ValueError("an ensemble predictor needs a model with a network")
        if self.n_draws * self.target.dim > MAX_VALUES:
            raise ValueError(f"{self.n_draws} draws of dimension {self.target.dim} exceed {MAX_VALUES} values")
        return self


class EnsemblePredictor(WeightPredictor):
    """The predictive of N fixed weight vectors: n = None uses all of them, n ≤ N the first n (draws are
    exchangeable, so the seed plays no part)."""

    def __init__(self, model: PredictiveModelConfig | dict[str, Any], layout: list[dict[str, Any]], weights: Tensor,
                 *, method: str = "particles", target_kind: str = "bnn"):
        if not isinstance(weights, Tensor) or weights.ndim != 2 or weights.shape[0] < 1:
            raise ValueError("weights must be a tensor [n >= 1, D]")
        self.weights = weights.detach().to(device="cpu", dtype=torch.float32).contiguous().clone()
        super().__init__(model, layout, self._select)
        if self.weights.shape[1] != self.network.dim:
            raise ValueError(f"weights have {self.weights.shape[1]} columns; the layout has {self.network.dim}")
        self.method = method
        self.target_kind = target_kind

    @property
    def n_draws(self) -> int:
        return int(self.weights.shape[0])

    def default_draws(self) -> int:
        return self.n_draws

    def _select(self, n: int | None, seed: int) -> Tensor:
        if n is None:
            return self.weights
        if n > self.n_draws:
            raise ValueError(f"n = {n} is more than the {self.n_draws} weight vectors this job has")
        return self.weights[:n]

    def config(self) -> dict[str, Any]:
        return {
            "format": FORMAT,
            "format_version": FORMAT_VERSION,
            "method": self.method,
            "target": {"kind": self.target_kind, "dim": int(self.weights.shape[1])},
            "n_draws": self.n_draws,
            "layout": self.network.describe_layout(),
            "model": self.model.model_dump(mode="json"),
        }

    def to_zip_bytes(self) -> bytes:
        """Deterministic `.zip` of config.json + weights.safetensors."""
        return archive.write_zip(self.config(), {WEIGHTS_TENSOR: self.weights})


def load_ensemble(source: bytes | bytearray | memoryview | str | Any | IO[bytes], *,
                  max_weights_bytes: int = archive.MAX_WEIGHTS_BYTES) -> EnsemblePredictor:
    """Rebuild an EnsemblePredictor from its archive; anything malformed raises ValueError."""
    data = archive.read_source(source, max_weights_bytes + archive.MAX_CONFIG_BYTES + 4096)
    raw_config, blob = archive.read_zip(data, max_weights_bytes)
    if not isinstance(raw_config, dict) or raw_config.get("format") != FORMAT:
        raise ValueError(f"not a Parvis predictor archive (format {raw_config.get('format')!r})"
                         if isinstance(raw_config, dict) else "the predictor config must be a JSON object")
    try:
        config = PredictorConfig.model_validate(raw_config)
    except ValidationError as exc:
        first = exc.errors(include_url=False)[0]
        raise ValueError(f"invalid predictor config: {'.'.join(map(str, first['loc']))}: {first['msg']}") from None
    tensors = archive.read_weights(blob, {WEIGHTS_TENSOR: (config.n_draws, config.target.dim)})
    return EnsemblePredictor(config.model, [block.model_dump() for block in config.layout], tensors[WEIGHTS_TENSOR],
                             method=config.method, target_kind=config.target.kind)


def ensemble_archive(method: Any) -> bytes | None:
    """The predictor archive of a particle method's final particles on a target with a network (a `bnn`, or
    a `function_posterior` with a bnn prior); None for anything else (no predictive model to store)."""
    from inference_core.prediction.model import predictive_model

    model = predictive_model(method.target)
    if model is None or model["network"] is None:
        return None
    predictor = EnsemblePredictor(model, method.target.describe_layout(), method.particles(),
                                  method=method.name, target_kind=method.target.kind)
    return predictor.to_zip_bytes()
