"""Targets: the protocol (base.py), one module per kind, and `build_target` from a validated spec dict."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel

from inference_core import errors
from inference_core.catalog import TARGET_KINDS, resolve
from inference_core.targets.base import BuildContext, Reference, Target

__all__ = ["BuildContext", "Reference", "Target", "build_target"]


def build_target(spec: dict[str, Any] | BaseModel, context: BuildContext | None = None) -> Target:
    """Build a target from its spec dict (validated here: this is also the notebook entry point), or from the
    schema object an admitted spec holds (`AdmittedSpec.target`, validated once already)."""
    if isinstance(spec, BaseModel):
        return resolve(TARGET_KINDS[spec.kind].builder)(spec, context or BuildContext())
    kind = TARGET_KINDS.get(spec.get("kind"))  # type: ignore[arg-type]
    if kind is None:
        raise errors.TargetUnknown(f"unknown target kind {spec.get('kind')!r}")
    model = kind.schema.model_validate(spec)
    return resolve(kind.builder)(model, context or BuildContext())
