"""The live progress bar of `wait`/`parvis watch` (tqdm on stderr) and the Server-Sent Events line parser."""

from __future__ import annotations

import json
import sys
from typing import Any, TextIO

TERMINAL_STATUSES = frozenset({"succeeded", "failed", "cancelled"})
# The metric shown next to the bar: the first one the job's method reports, in this order.
HEADLINE_METRICS = ("loss", "ksd", "ksd_imq", "elbo", "helper_loss", "mean_error")


def headline_metric(metrics: dict[str, Any] | None) -> tuple[str, float] | None:
    for name in HEADLINE_METRICS:
        value = (metrics or {}).get(name)
        if isinstance(value, int | float):
            return name, float(value)
    return None


def format_seconds(seconds: float | None) -> str:
    if seconds is None:
        return "?"
    seconds = int(round(seconds))
    minutes, secs = divmod(seconds, 60)
    hours, minutes = divmod(minutes, 60)
    return f"{hours}:{minutes:02d}:{secs:02d}" if hours else f"{minutes:02d}:{secs:02d}"


def describe(job: dict[str, Any]) -> str:
    """One line for people: id, status, step/total, the headline metric, the server's ETA."""
    progress = job.get("progress") or {}
    parts = [str(job.get("id")), str(job.get("status")),
             f"step {progress.get('step', 0)}/{progress.get('total_steps', '?')}"]
    if (metric := headline_metric(job.get("metrics"))) is not None:
        parts.append(f"{metric[0]}={metric[1]:.4g}")
    if job.get("status") not in TERMINAL_STATUSES and progress.get("eta_s") is not None:
        parts.append(f"eta {format_seconds(progress['eta_s'])}")
    if job.get("sampler_id"):
        parts.append(f"sampler {job['sampler_id']}")
    if job.get("error"):
        parts.append(f"error {job['error'].get('code')}: {job['error'].get('detail')}")
    if (verdict := (job.get("quality") or {}).get("verdict")) is not None:
        parts.append(f"quality {verdict}")
    return "  ".join(parts)


def quality_notes(job: dict[str, Any]) -> list[str]:
    """The lines under `describe` for a finished job its `quality` block does not trust: each warning, then
    what to try (`next_steps`, each a remedy the service measured)."""
    quality = job.get("quality") or {}
    return ([f"  warning {w.get('code')}: {w.get('message')}" for w in quality.get("warnings") or []]
            + [f"  try: {step}" for step in quality.get("next_steps") or []])


class ProgressBar:
    """A tqdm bar over the job's steps: `step/total`, the headline metric (loss or KSD), status and the
    server's ETA (`progress.eta_s`, which knows the step rate of the worker, unlike a client-side guess)."""

    def __init__(self, enabled: bool = True, file: TextIO | None = None):
        self.enabled = enabled
        self.file = file if file is not None else sys.stderr
        self._bar: Any = None

    def update(self, job: dict[str, Any]) -> None:
        if not self.enabled:
            return
        progress = job.get("progress") or {}
        if self._bar is None:
            from tqdm import tqdm

            self._bar = tqdm(total=progress.get("total_steps") or None, desc=str(job.get("id")), unit="step",
                             file=self.file, dynamic_ncols=True, mininterval=0.2,
                             bar_format="{desc} {percentage:3.0f}%|{bar}| {n_fmt}/{total_fmt} steps "
                                        "[{elapsed}{postfix}]")
        step = int(progress.get("step") or 0)
        if step > self._bar.n:
            self._bar.update(step - self._bar.n)
        postfix = [str(job.get("status"))]
        if (metric := headline_metric(job.get("metrics"))) is not None:
            postfix.append(f"{metric[0]}={metric[1]:.4g}")
        if job.get("status") not in TERMINAL_STATUSES:
            postfix.append(f"eta {format_seconds(progress.get('eta_s'))}")
        self._bar.set_postfix_str(", ".join(postfix), refresh=True)

    def close(self) -> None:
        if self._bar is not None:
            self._bar.close()
            self._bar = None


class EventStreamParser:
    """Server-Sent Events (text/event-stream) fed line by line; yields the parsed JSON of each `job` event.
    Comments (`: keep-alive`) and other event types are skipped."""

    def __init__(self) -> None:
        self._event = "message"
        self._data: list[str] = []

    def feed(self, line: str) -> dict[str, Any] | None:
        line = line.rstrip("\r\n")
        if line == "":
            event, data = self._event, "\n".join(self._data)
            self._event, self._data = "message", []
            if event == "job" and data:
                return json.loads(data)
            return None
        if line.startswith(":"):
            return None
        field, _, value = line.partition(":")
        value = value[1:] if value.startswith(" ") else value
        if field == "event":
            self._event = value
        elif field == "data":
            self._data.append(value)
        return None
