"""The worker's maintenance loop warns once per outage (with the traceback), not once a pass, and says when its
passes work again (a PostgreSQL stopped for 11 s gave 22 tracebacks at a 0.5 s reaper interval)."""

from __future__ import annotations

import logging
import threading

import pytest

from workers.maintenance import Maintenance


class _Loop(Maintenance):
    def __init__(self, fail_passes: int, total_passes: int):  # no database, broker or store: only run()
        threading.Thread.__init__(self, daemon=True)
        self.settings = type("S", (), {"heartbeat_seconds": 0.001, "reaper_interval_seconds": 0.001})()
        self.stopped = threading.Event()
        self.fail_passes, self.total_passes, self.passes = fail_passes, total_passes, 0

    def announce(self) -> None:
        self.passes += 1
        if self.passes >= self.total_passes:
            self.stopped.set()
        if self.passes <= self.fail_passes:
            raise ConnectionError("database unreachable")

    def reap(self) -> None: ...

    def sweep(self) -> None: ...


def test_one_warning_per_outage_and_a_note_when_it_ends(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG, logger="parvis.worker")
    loop = _Loop(fail_passes=20, total_passes=25)
    loop.run()
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1 and warnings[0].exc_info is not None
    assert sum("failed again" in r.getMessage() for r in caplog.records) == 19
    assert any("work again" in r.getMessage() for r in caplog.records if r.levelno == logging.INFO)
