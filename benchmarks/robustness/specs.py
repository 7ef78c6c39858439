"""What each robustness-suite column submits beyond `method` and `target` (shared by the HTTP runner,
benchmarks/robustness.py, and the in-process device check, benchmarks/device_check.py)."""

from __future__ import annotations

from typing import Any

#: what each method gets beyond `method` and `target` (issue 14: defaults, except that `auto`'s `steps` is an
#: upper bound and NUTS runs 1,000 warm-up + 1,000 kept transitions in each of its 4 default chains)
METHOD_SPECS: dict[str, dict[str, Any]] = {
    "auto": {"steps": 3000},
    # keep and return every draw (the job's particles are num_particles of the kept draws, 100 by default:
    # too few to meet the mean bar even when exact)
    "nuts": {"steps": 2000, "num_particles": 4000, "options": {"warmup_steps": 1000, "max_draws_per_chain": 1001}},
    # a column of its own, not a server method: `auto` with its neural transport forced on every problem
    "auto_flow": {"method": "auto", "steps": 3000, "options": {"transport": "flow"}},
}


def server_method(column: str) -> str:
    """The server method a table column runs (`auto_flow` is `auto` with an option)."""
    return METHOD_SPECS.get(column, {}).get("method", column)
