"""What every trained sampler kind shares: a validated JSON config and float32 CPU tensors, handed out as copies."""

from __future__ import annotations

from typing import Any

from torch import Tensor

from inference_core.samplers.config import validate_config


class FrozenSampler:
    _config: dict[str, Any]
    _tensors: dict[str, Tensor]

    @property
    def config(self) -> dict[str, Any]:
        """The JSON-serialisable config (a copy)."""
        return validate_config(self._config).model_dump(mode="json")

    def tensors(self) -> dict[str, Tensor]:
        """Name → float32 CPU tensor (clones)."""
        return {name: t.clone() for name, t in self._tensors.items()}
