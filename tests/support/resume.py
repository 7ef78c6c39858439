"""A run-loop hook for resume tests: stop before step `step + 1`, keeping every checkpoint as serialised bytes
(as the worker stores them)."""

from __future__ import annotations

from typing import Any

from inference_core import run
from inference_core.serialization import state_from_bytes, state_to_bytes
from inference_core.training import RunHooks, RunResult


class StopAt(RunHooks):
    def __init__(self, step: int):
        self.step = step
        self.current = 0
        self.checkpoints: dict[int, bytes] = {}

    def on_step(self, step: int, total_steps: int, metrics: dict[str, float]) -> None:
        self.current = step

    def save_checkpoint(self, step: int, state: dict[str, Any]) -> None:
        self.checkpoints[step] = state_to_bytes(state)

    def should_stop(self) -> str | None:
        return "preempted" if self.current >= self.step else None


def straight_stopped_resumed(spec: dict[str, Any], stop: int = 7, resume_from: int = 4
                             ) -> tuple[RunResult, RunResult, RunResult]:
    """`spec` run straight through; run again and preempted after step `stop` (its only checkpoint at
    `resume_from`, as `checkpoint_every` should make it); and resumed from that checkpoint's bytes, as a
    redelivered job is (steps resume_from + 1 .. stop are redone)."""
    straight = run(spec)
    hooks = StopAt(stop)
    stopped = run(spec, hooks=hooks)
    assert stopped.stopped == "preempted" and sorted(hooks.checkpoints) == [resume_from]
    return straight, stopped, run(spec, resume_state=state_from_bytes(hooks.checkpoints[resume_from]))
