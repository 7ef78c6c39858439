"""Shared by the `holdout_selection_every` tests of the methods that have it (fvi, amortized_fsvgd)."""

from __future__ import annotations

import torch

from inference_core.spec import validate_job_spec
from inference_core.training import build_method, run


def stepped(spec: dict, steps: int) -> tuple[object, dict[int, float]]:
    """The job's method stepped `steps` times by hand, and its held-out scores by the step they were taken at."""
    method = build_method(validate_job_spec(spec))
    scores = {}
    for _ in range(steps):
        metrics = method.step()
        if "holdout_score" in metrics:
            scores[method.step_count] = metrics["holdout_score"]
    return method, scores


def assert_resume_carries_the_selection(spec: dict, stop_after: int) -> None:
    """A run stopped after `stop_after` steps (with a state kept by then) and resumed from its state ends with the
    same kept state, score and particles as the run straight through."""
    straight = run(spec).method
    first, _ = stepped(spec, stop_after)
    assert first.selection.state is not None
    resumed = run(spec, resume_state=first.state_dict()).method
    assert resumed.selection.step == straight.selection.step and resumed.selection.best == straight.selection.best
    for name, t in straight.selection.state.items():
        assert torch.equal(t, resumed.selection.state[name]), name
    assert torch.equal(straight.particles(), resumed.particles())
