"""Parvis inference core: targets, pairwise kernels, particle and generative methods, samplers, metrics.

Pure PyTorch; imports no web, queue or database code. `from inference_core import run` trains from a JobSpec
dict exactly as the service does.
"""

from __future__ import annotations

from typing import Any

__version__ = "0.1.0"


def run(spec: Any, **kwargs: Any) -> Any:
    """Train from a JobSpec dict; see `inference_core.training.run` (imported lazily: it loads torch)."""
    from inference_core.training import run as _run

    return _run(spec, **kwargs)
