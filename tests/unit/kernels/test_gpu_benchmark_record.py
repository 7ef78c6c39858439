"""docs/benchmarks.md's GPU section is what `benchmarks/pairwise_gpu.py --render` makes of the committed raw
results (the public record is regenerable, not edited by hand), and every timed cell it shows came from them."""

from __future__ import annotations

import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(ROOT / "benchmarks"))

import pairwise_gpu  # noqa: E402

from tests.support.docs import section_lines  # noqa: E402


def test_gpu_section_is_rendered_from_the_committed_raw_results():
    runs = [json.loads(f.read_text()) for f in pairwise_gpu.RESULT_FILES]
    rendered = [ln for ln in pairwise_gpu.render(runs).splitlines() if ln.strip()]
    documented = section_lines((ROOT / "docs" / "benchmarks.md").read_text(), pairwise_gpu.TITLE)
    assert documented == rendered


def test_the_million_particle_row_quotes_its_raw_time():
    forms = json.loads(pairwise_gpu.RESULT_FILES[1].read_text())
    row = next(r for r in forms["million"] if r["case"] == "svgd_direction ieee" and r["d"] == 2)
    text = pairwise_gpu.render([forms])
    assert f"| 2 | svgd_direction ieee | {pairwise_gpu.fmt_seconds(row['t'])} |" in text
    assert row["n"] == 1_000_000
