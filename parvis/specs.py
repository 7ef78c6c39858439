"""JobSpecs from files: JSON or YAML (`yaml.safe_load`: plain data only, no tags that build objects)."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from parvis.errors import ParvisError


def load_spec(spec: dict[str, Any] | str | Path) -> dict[str, Any]:
    """A dict as is; a path to a `.json`, `.yaml` or `.yml` file; `-` reads standard input (JSON or YAML)."""
    if isinstance(spec, dict):
        return spec
    if str(spec) == "-":
        text, name = sys.stdin.read(), "standard input"
    else:
        path = Path(spec)
        try:
            text, name = path.read_text(), str(path)
        except OSError as exc:
            raise ParvisError("spec_unreadable", f"cannot read {path}: {exc.strerror or exc}") from None
    if str(spec).endswith(".json"):
        try:
            loaded = json.loads(text)
        except ValueError as exc:
            raise ParvisError("spec_unreadable", f"{name} is not valid JSON: {exc}") from None
    else:
        import yaml  # JSON is YAML too, so standard input and .yaml/.yml files go through it

        try:
            loaded = yaml.safe_load(text)
        except yaml.YAMLError as exc:
            raise ParvisError("spec_unreadable", f"{name} is not valid YAML: {str(exc).splitlines()[0]}") from None
    if not isinstance(loaded, dict):
        raise ParvisError("spec_unreadable", f"{name} must hold one JobSpec object, not {type(loaded).__name__}")
    return loaded
