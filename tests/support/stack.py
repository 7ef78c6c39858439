"""Start the real service in subprocesses: the API under uvicorn and Celery workers, in embedded mode
(SQLite + filesystem broker) or cluster mode (PostgreSQL + Redis on 127.0.0.1), and talk to it over HTTP."""

from __future__ import annotations

import contextlib
import glob
import os
import pwd
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
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


class PrivatePostgres:
    """A PostgreSQL server of a test's own, for tests that stop and start the server (the machine's shared one on
    127.0.0.1:5432 serves other tests at the same time): `initdb` in a temporary directory, trust authentication,
    listening on 127.0.0.1 on a free port with its unix socket in that directory. initdb refuses to run as root,
    so as root the server runs as the `postgres` OS user, which owns the directory. `remove()` stops it and
    deletes the directory, whatever state it is in."""

    OS_USER = "postgres"

    @staticmethod
    def bin_dir() -> Path | None:
        for candidate in [os.path.dirname(shutil.which("pg_ctl") or ""),
                          *sorted(glob.glob("/usr/lib/postgresql/*/bin"), reverse=True)]:
            if candidate and all(os.access(Path(candidate) / name, os.X_OK) for name in ("initdb", "pg_ctl")):
                return Path(candidate)
        return None

    @classmethod
    def unavailable(cls) -> str | None:
        """Why a private server cannot be run here (a reason to skip), or None."""
        if cls.bin_dir() is None:
            return "initdb/pg_ctl not found (PATH, /usr/lib/postgresql/*/bin)"
        if os.geteuid() == 0:
            try:
                pwd.getpwnam(cls.OS_USER)
            except KeyError:
                return f"running as root and there is no {cls.OS_USER!r} OS user to run initdb as"
            if shutil.which("runuser") is None:
                return "running as root and runuser is not available"
        return None

    def __init__(self) -> None:
        reason = self.unavailable()
        if reason is not None:
            raise RuntimeError(reason)
        self.bin = self.bin_dir()
        self.root = Path(tempfile.mkdtemp(prefix="parvis-pg-"))  # short: the socket path has a length limit
        self.as_user: list[str] = []
        if os.geteuid() == 0:
            user = pwd.getpwnam(self.OS_USER)
            os.chown(self.root, user.pw_uid, user.pw_gid)
            self.as_user = ["runuser", "-u", self.OS_USER, "--"]
        self.data = self.root / "data"
        self.log = self.root / "server.log"
        self.port = free_port()
        self.admin_url = f"postgresql://postgres@127.0.0.1:{self.port}/postgres"
        try:
            self._pg("initdb", "-D", str(self.data), "-A", "trust", "-U", "postgres", "-E", "UTF8", "--no-sync",
                     "--no-instructions")
        except BaseException:
            shutil.rmtree(self.root, ignore_errors=True)
            raise

    def _pg(self, tool: str, *args: str) -> None:
        done = subprocess.run([*self.as_user, str(self.bin / tool), *args], capture_output=True, text=True,
                              timeout=120, check=False)
        if done.returncode != 0:
            raise RuntimeError(f"{tool} {' '.join(args)} failed ({done.returncode}): {done.stdout}{done.stderr}")

    def start(self) -> None:
        """Start the server (again: same data directory and port) and wait until it accepts connections."""
        options = f"-c listen_addresses=127.0.0.1 -p {self.port} -k {self.root}"
        self._pg("pg_ctl", "start", "-w", "-t", "60", "-D", str(self.data), "-l", str(self.log), "-o", options)

    def stop(self, mode: str = "immediate") -> None:
        """`pg_ctl stop -m mode`: "immediate" quits at once, as a crash would (every connection cut, crash recovery
        at the next start); "fast" rolls back open transactions and shuts down cleanly."""
        self._pg("pg_ctl", "stop", "-w", "-m", mode, "-D", str(self.data))

    def create_database(self, name: str) -> str:
        """A new database on the server: its SQLAlchemy URL."""
        import psycopg

        with psycopg.connect(self.admin_url, autocommit=True) as conn:
            conn.execute(f'CREATE DATABASE "{name}"')
        return f"postgresql+psycopg://postgres@127.0.0.1:{self.port}/{name}"

    def remove(self) -> None:
        if (self.data / "postmaster.pid").exists():
            with contextlib.suppress(Exception):
                self.stop("immediate")
        shutil.rmtree(self.root, ignore_errors=True)


class Stack:
    """One deployment under test: its environment, API process, worker processes and an HTTP client. Cluster mode
    makes a fresh database on the machine's PostgreSQL, or uses `database_url` (kept at `stop()`)."""

    def __init__(self, mode: str, data_dir: Path, extra_env: dict[str, str] | None = None,
                 database_url: str | None = None):
        self.mode = mode
        self.data_dir = data_dir
        self.database: PostgresDatabase | None = None
        env = {k: v for k, v in os.environ.items() if not k.startswith("PARVIS_")}
        env.update(FAST_LIFECYCLE)
        env["PARVIS_DATA_DIR"] = str(data_dir)
        env["PYTHONUNBUFFERED"] = "1"
        if mode == "cluster":
            if database_url is None:
                self.database = PostgresDatabase()
                database_url = self.database.url
            env["PARVIS_DATABASE_URL"] = database_url
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
