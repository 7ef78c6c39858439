"""docs/benchmarks.md's table of `auto` on seeds 0-9 is what `benchmarks/auto_seeds.py --report` makes of the
committed raw results, and its counts are those of the raw cells (a silent miss: outside the bars, called `good`)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(ROOT))

from benchmarks import auto_seeds  # noqa: E402
from benchmarks.robustness.scoring import LOG_SD_BAR, MEAN_BAR  # noqa: E402
from tests.support.docs import section_lines  # noqa: E402


def test_the_section_is_rendered_from_the_committed_results() -> None:
    results = json.loads(auto_seeds.RESULTS.read_text())
    rendered = [ln for ln in auto_seeds.report(results, list(range(10))).splitlines() if ln.strip()]
    assert section_lines((ROOT / "docs" / "benchmarks.md").read_text(), auto_seeds.SECTION) == rendered


def test_a_cell_passes_only_within_both_bars_in_both_spaces_and_silent_misses_are_counted_from_the_cells() -> None:
    cells = json.loads(auto_seeds.RESULTS.read_text())["cells"]
    for cell in cells.values():
        if cell.get("status") != "succeeded":
            continue
        within = all(cell[space]["mean_error"] <= MEAN_BAR and cell[space]["log_sd_error"] <= LOG_SD_BAR
                     for space in ("sampler", "model"))
        assert cell["pass"] == within
    silent = sum(auto_seeds.silent(cell) for cell in cells.values())
    assert silent == sum(c.get("status") == "succeeded" and not c["pass"] and c["verdict"] == "good"
                         for c in cells.values())
    last = section_lines((ROOT / "docs" / "benchmarks.md").read_text(), auto_seeds.SECTION)[-1]
    assert last.endswith(f"{silent} silent {'miss' if silent == 1 else 'misses'}."), last
