"""docs/reproduction.md's UCI section is what `benchmarks/reproduce_uci.py --report` makes of the committed raw
results (issue 40: regenerable, no "not run" rows for cells that were run), and a cell is reused only under the
same protocol, with renamed option spellings read in today's form."""

from __future__ import annotations

import copy
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(ROOT))

from benchmarks import reproduce_uci  # noqa: E402
from tests.support.docs import section_lines  # noqa: E402


def test_the_section_is_rendered_from_the_committed_results() -> None:
    results = json.loads(reproduce_uci.RESULTS.read_text())
    rendered = [ln for ln in reproduce_uci.report(results).splitlines() if ln.strip()]
    documented = section_lines(reproduce_uci.DOC.read_text(), reproduce_uci.SECTION)
    assert documented == rendered
    table = [ln for ln in documented if ln.startswith("| ") and " | " in ln]
    assert table and not any("not run" in ln for ln in table), [ln for ln in table if "not run" in ln]


def test_a_renamed_spelling_is_the_same_protocol_and_a_changed_default_is_not() -> None:
    current = reproduce_uci.protocol("boston", "gpvi")
    assert "kernel" in current["resolved_options"]
    old = copy.deepcopy(current)
    old["resolved_options"]["bandwidth"] = old["resolved_options"].pop("kernel")["bandwidth"]
    assert reproduce_uci.same_protocol(old, current)
    changed = copy.deepcopy(current)
    changed["resolved_options"]["kernel"]["bandwidth"]["divisor"] = "none"
    assert not reproduce_uci.same_protocol(changed, current)
    fvi = reproduce_uci.protocol("boston", "fvi")
    before_selection = copy.deepcopy(fvi)
    del before_selection["resolved_options"]["holdout_selection_every"]  # a new option with a new behaviour
    assert not reproduce_uci.same_protocol(before_selection, fvi)


def test_an_option_added_later_matches_old_cells_only_at_the_value_they_ran_with() -> None:
    """A cell recorded before `holdout_selection_every` existed ran without it (ADDED_OPTIONS: 0): it is the same
    protocol as one that sets 0, and stale under today's default (100), which the committed cells ran with."""
    current = reproduce_uci.protocol("boston", "amortized_fsvgd")
    assert current["resolved_options"]["holdout_selection_every"] == 100
    old = copy.deepcopy(current)
    del old["resolved_options"]["holdout_selection_every"]
    assert not reproduce_uci.same_protocol(old, current)
    without = copy.deepcopy(current)
    without["options"]["holdout_selection_every"] = without["resolved_options"]["holdout_selection_every"] = 0
    assert reproduce_uci.same_protocol(old, without)


def test_gpvi_cells_record_the_lambda_they_ran_with() -> None:
    """λ is spelled out in GPVI's protocol, so a change of the BNN-hypernetwork default makes its cells stale."""
    from inference_core.methods.generative.base import HYPERNETWORK_LAMBDA

    current = reproduce_uci.protocol("boston", "gpvi")
    assert current["resolved_options"]["generator"]["lambda"] == HYPERNETWORK_LAMBDA
    before = copy.deepcopy(current)
    before["options"].pop("generator")
    before["resolved_options"]["generator"]["lambda"] = None  # the cells of the 0.01 default
    assert not reproduce_uci.same_protocol(before, current)
