"""The raw-results files the benchmark scripts write and report from: JSON, saved whole after every cell so that
an interrupted run resumes where it stopped."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any


def load_results(path: Path, empty_key: str = "runs") -> dict[str, Any]:
    """The saved results, or `{empty_key: {}}` where none are saved yet."""
    return json.loads(path.read_text()) if path.exists() else {empty_key: {}}


def save_results(path: Path, results: dict[str, Any]) -> None:
    """Write through a temporary file, so that a run killed mid-write leaves the last complete file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(results, indent=1, sort_keys=True) + "\n")
    tmp.replace(path)
