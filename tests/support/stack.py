"""Start the real service in subprocesses: the API under uvicorn and Celery workers, in embedded mode
(SQLite + filesystem broker) or cluster mode (PostgreSQL + Redis on 127.0.0.1), and talk to it over HTTP."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx

POSTGRES_ADMIN_URL = os.environ.get("PARVIS_TEST_POSTGRES", "postgresql://postgres@127.0.0.1:5432/test")
REDIS_URL = os.environ.get("PARVIS_TEST_REDIS", "redis://127.0.0.1:6379/0")

FAST_LIFECYCLE = {
    "PARVIS_LEASE_SECONDS": "4",
    "PARVIS_HEARTBEAT_SECONDS": "0.5",
    "PARVIS_REAPER_INTERVAL_SECONDS": "0.5",
    "PARVIS_PROGRESS_INTERVAL_SECONDS": "0.2",
    "PARVIS_WORKER_SHUTDOWN_GRACE_SECONDS": "20",
}


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def wait_for(predicate: Callable[[], Any], timeout: float, interval: float = 0.1, what: str = "condition") -> Any:
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise TimeoutError(f"timed out after {timeout:.0f} s waiting for {what}")
        time.sleep(interval)


class PostgresDatabase:
    """A fresh database per test session on the machine's PostgreSQL, dropped afterwards."""

    def __init__(self) -> None:
        import psycopg

        self.name = f"parvis_test_{uuid.uuid4().hex[:12]}"
        with psycopg.connect(POSTGRES_ADMIN_URL, autocommit=True) as conn:
            conn.execute(f'CREATE DATABASE "{self.name}"')
        base = POSTGRES_ADMIN_URL.rsplit("/", 1)[0].replace("postgresql://", "postgresql+psycopg://")
        self.url = f"{base}/{self.name}"

    def drop(self) -> None:
        import psycopg

        with psycopg.connect(POSTGRES_ADMIN_URL, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{self.name}" WITH (FORCE)')


class Stack:
    """One deployment under test: its environment, API process, worker processes and an HTTP client."""

    def __init__(self, mode: str, data_dir: Path, extra_env: dict[str, str] | None = None):
        self.mode = mode
        self.data_dir = data_dir
        self.database: PostgresDatabase | None = None
        env = {k: v for k, v in os.environ.items() if not k.startswith("PARVIS_")}
        env.update(FAST_LIFECYCLE)
        env["PARVIS_DATA_DIR"] = str(data_dir)
        env["PYTHONUNBUFFERED"] = "1"
        if mode == "cluster":
            self.database = PostgresDatabase()
            env["PARVIS_DATABASE_URL"] = self.database.url
            env["PARVIS_BROKER_URL"] = REDIS_URL
            env["PARVIS_QUEUE"] = f"test-{uuid.uuid4().hex[:10]}"  # isolates this session's messages
        elif mode != "embedded":
            raise ValueError(mode)
        env.update(extra_env or {})
        self.env = env
        self.port = free_port()
        self.base_url = f"http://127.0.0.1:{self.port}"
        self.api: subprocess.Popen | None = None
        self.workers: list[subprocess.Popen] = []
        self.logs = data_dir / "logs"
        self.logs.mkdir(parents=True, exist_ok=True)
        self.client = httpx.Client(base_url=self.base_url, timeout=30)

    def _spawn(self, args: list[str], log_name: str) -> subprocess.Popen:
        log = open(self.logs / log_name, "ab")  # noqa: SIM115 - owned by the process for its lifetime
        return subprocess.Popen([sys.executable, *args], env=self.env, stdout=log, stderr=subprocess.STDOUT,
                                start_new_session=True)

    def migrate(self) -> None:
        subprocess.run([sys.executable, "-m", "app.cli", "db", "upgrade"], env=self.env, check=True,
                       capture_output=True)

    def start_api(self, *extra_args: str) -> None:
        self.api = self._spawn(["-m", "app.cli", "api", "--port", str(self.port), *extra_args], "api.log")
        wait_for(self._live, 30, what="the API to answer")

    def stop_api(self) -> None:
        """SIGTERM the API (all its processes), SIGKILL what is left after 20 s; start_api starts it cold."""
        if self.api is None:
            return
        self.api.send_signal(signal.SIGTERM)
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.api.wait(timeout=20)
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.api.pid, signal.SIGKILL)
        self.api.wait(timeout=10)
        self.api = None

    def _live(self) -> bool:
        try:
            return self.client.get("/v1/health/live").status_code == 200
        except httpx.TransportError:
            return False

    def start_worker(self, wait_ready: bool = True) -> subprocess.Popen:
        before = self.worker_count()
        worker = self._spawn(["-m", "workers"], f"worker-{len(self.workers)}.log")
        self.workers.append(worker)
        if wait_ready:
            wait_for(lambda: self.worker_count() > before, 60, what="a worker to announce itself")
        return worker

    def worker_count(self) -> int:
        response = self.client.get("/v1/health/ready")
        return int(response.json().get("checks", {}).get("workers", 0))

    def kill_worker(self, worker: subprocess.Popen, sig: int = signal.SIGKILL) -> None:
        """Signal the worker's whole process group (main process and pool child)."""
        with contextlib.suppress(ProcessLookupError):
            os.killpg(worker.pid, sig)
        worker.wait(timeout=60)

    def submit(self, spec: dict[str, Any], **kwargs: Any) -> httpx.Response:
        return self.client.post("/v1/jobs", json=spec, **kwargs)

    def job(self, job_id: str) -> dict[str, Any]:
        response = self.client.get(f"/v1/jobs/{job_id}")
        response.raise_for_status()
        return response.json()

    def wait_status(self, job_id: str, statuses: set[str], timeout: float) -> dict[str, Any]:
        return wait_for(lambda: (j := self.job(job_id))["status"] in statuses and j, timeout, interval=0.1,
                        what=f"job {job_id} to reach {sorted(statuses)}")

    def succeeded(self, spec: dict[str, Any], timeout: float = 300) -> dict[str, Any]:
        """Submit `spec`, wait for it to finish, assert it succeeded; the job."""
        job = self.wait_status(self.submit(spec).json()["id"], {"succeeded", "failed"}, timeout)
        assert job["status"] == "succeeded", (job["error"], self.log_tail())
        return job

    def sample_npy(self, sampler_id: str, n: int, seed: int) -> Any:
        """`/v1/samplers/{id}/sample` as the float32 `.npy` answer, loaded."""
        import io

        import numpy as np

        response = self.client.post(f"/v1/samplers/{sampler_id}/sample", json={"n": n, "seed": seed},
                                    headers={"Accept": "application/x-npy"})
        assert response.status_code == 200, response.text
        return np.load(io.BytesIO(response.content), allow_pickle=False)

    def log_tail(self, lines: int = 60) -> str:
        out = []
        for path in sorted(self.logs.glob("*.log")):
            text = path.read_text(errors="replace").splitlines()[-lines:]
            out.append(f"--- {path.name}\n" + "\n".join(text))
        return "\n".join(out)

    def stop(self) -> None:
        """Tear down: SIGKILL every worker's process group and SIGTERM the API, then SIGKILL whatever is left of
        every process group, whatever happened before. A test's end needs no graceful hand-back (tests of that
        send the signal themselves), and a warm Celery shutdown of an idle worker took 7.5 s (the broker's drain
        timeout, then billiard's handler threads), once per worker of every test; each stack has its own queue
        and database, so what a killed worker leaves behind is nobody's."""
        self.client.close()
        for worker in self.workers:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(worker.pid, signal.SIGKILL)
        if self.api is not None and self.api.poll() is None:
            self.api.send_signal(signal.SIGTERM)
        for proc in [*self.workers, *([self.api] if self.api else [])]:
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(timeout=20)
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(proc.pid, signal.SIGKILL)
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(timeout=10)
        if self.database is not None:
            self.database.drop()


@contextlib.contextmanager
def started_embedded(root: Path, extra_env: dict[str, str] | None = None, mode: str = "embedded") -> Iterator[Stack]:
    """An embedded stack (API + worker, SQLite, filesystem queue; or `mode` "cluster") under `root`, migrated and
    started; stopped on exit. What the benchmark scripts that go through HTTP share."""
    stack = Stack(mode, root, extra_env)
    try:
        stack.migrate()
        stack.start_api()
        stack.start_worker()
        yield stack
    finally:
        stack.stop()


def tenant_key(stack: Stack, tenant: str) -> dict[str, str]:
    """An Authorization header with a new API key of `tenant`, made by the CLI as an operator would."""
    done = subprocess.run([sys.executable, "-m", "app.cli", "keys", "create", "--tenant", tenant], env=stack.env,
                          capture_output=True, text=True, timeout=120, check=True)
    return {"Authorization": f"Bearer {done.stdout.strip().splitlines()[-1]}"}


def assert_problem(response: httpx.Response, status: int, code: str) -> dict[str, Any]:
    """The body of a problem+json error response with this status and stable `code`."""
    assert response.status_code == status, response.text
    assert response.headers["content-type"] == "application/problem+json"
    body = response.json()
    assert body["code"] == code, body
    return body
