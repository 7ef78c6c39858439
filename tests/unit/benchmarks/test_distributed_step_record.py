"""docs/benchmarks.md's section on multi-process jobs is what `benchmarks/distributed_step.py --render` makes of the
committed raw results, and its ratios are those of the raw step times."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(ROOT / "benchmarks"))

import distributed_step  # noqa: E402

from tests.support.docs import section_lines  # noqa: E402


def test_the_section_is_rendered_from_the_committed_results() -> None:
    rendered = [ln for ln in distributed_step.render().splitlines() if ln.strip()]
    assert section_lines((ROOT / "docs" / "benchmarks.md").read_text(), distributed_step.TITLE) == rendered


def test_the_speed_ups_are_the_ratios_of_the_step_times() -> None:
    run = json.loads(distributed_step.RESULTS["cpu"].read_text())
    assert run["ranks"] == [1, 2] and run["rows"]
    for row in run["rows"]:
        assert row["speedup"]["2"] == pytest.approx(row["step_s"]["1"] / row["step_s"]["2"])
