"""`parvis serve` spawned as a user runs it (embedded mode: SQLite, filesystem broker, one worker), in a temp
data directory on a free port, for the client and CLI tests."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
from pathlib import Path

import httpx
import psutil

from tests.support.stack import FAST_LIFECYCLE, free_port, wait_for


def client_env(home: Path, url: str | None = None) -> dict[str, str]:
    """The environment of a process the tests start: no PARVIS_* of the caller, HOME in the temp dir."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("PARVIS_")}
    env.update(PYTHONUNBUFFERED="1", HOME=str(home), OMP_NUM_THREADS="1")
    if url is not None:
        env["PARVIS_URL"] = url
    return env


class ServedParvis:
    def __init__(self, root: Path, *args: str, **settings: str):
        """`args`: more `parvis serve` options (e.g. "--auth"); `settings`: PARVIS_* variables."""
        self.root = root
        root.mkdir(parents=True, exist_ok=True)
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log = root / "serve.log"
        self.data_dir = root / "data"
        env = client_env(root)
        env.update(FAST_LIFECYCLE)
        env.update(settings)
        with open(self.log, "wb") as out:
            self.process = subprocess.Popen(
                [sys.executable, "-m", "app.cli", "serve", "--port", str(self.port), "--data-dir", str(self.data_dir), *args],
                env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)

    def wait_ready(self, timeout: float = 120) -> None:
        def ready() -> bool:
            if self.process.poll() is not None:
                raise RuntimeError(f"parvis serve exited: {self.log.read_text()[-3000:]}")
            try:
                return httpx.get(f"{self.url}/v1/health/ready", timeout=5).status_code == 200
            except httpx.TransportError:
                return False

        wait_for(ready, timeout, interval=0.3, what="parvis serve to become ready")

    def stop(self) -> None:
        """Tear down at once: the service, its worker and the pool (test_serve_command.py tests the graceful stop;
        here it cost the worker's warm shutdown, about 7.5 s, at every fixture's end). The worker runs in a session
        of its own (app/cli.py), so every descendant is killed, not only the service's process group."""
        with contextlib.suppress(psutil.NoSuchProcess):
            for child in psutil.Process(self.process.pid).children(recursive=True):
                with contextlib.suppress(psutil.NoSuchProcess):
                    child.kill()
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.process.pid, signal.SIGKILL)
        self.process.wait(timeout=30)
