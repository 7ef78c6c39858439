"""Newcomer papercuts (issue 42, item 6) that need real processes: `parvis keys` on a fresh data directory, and
a Celery worker's pool processes applying PARVIS_WORKER_TORCH_THREADS."""

from __future__ import annotations

import contextlib
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.support.serve import client_env

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]


def parvis(home: Path, *args: str, **settings: str) -> subprocess.CompletedProcess[str]:
    env = {**client_env(home), **settings}
    return subprocess.run([sys.executable, "-m", "app.cli", *args], cwd=home, env=env, capture_output=True,
                          text=True, timeout=120)


def test_keys_on_a_fresh_data_directory_create_the_schema(tmp_path: Path) -> None:
    data = tmp_path / "fresh"
    created = parvis(tmp_path, "keys", "create", "--tenant", "acme", "--data-dir", str(data))
    assert created.returncode == 0, created.stderr
    assert "Traceback" not in created.stderr
    key = created.stdout.strip().splitlines()[-1]
    assert re.fullmatch(r"pvs_[0-9a-f]+_\S+", key)
    assert (data / "parvis.db").exists()

    listed = parvis(tmp_path, "keys", "list", "--data-dir", str(data))
    assert listed.returncode == 0, listed.stderr
    (row,) = listed.stdout.strip().splitlines()[1:]
    key_id = row.split("\t")[0]
    assert row.split("\t")[1] == "acme"
    revoked = parvis(tmp_path, "keys", "revoke", key_id, "--data-dir", str(data))
    assert revoked.returncode == 0 and revoked.stdout.startswith(f"revoked {key_id}"), revoked.stderr

    for command in (["list"], ["revoke", "key_missing"]):  # each on its own fresh directory
        other = tmp_path / f"fresh-{command[0]}"
        done = parvis(tmp_path, "keys", *command, "--data-dir", str(other))
        assert "Traceback" not in done.stderr and "no such table" not in done.stderr, done.stderr
        assert done.returncode == (0 if command == ["list"] else 1)


def test_keys_against_an_external_database_without_the_schema_say_what_to_run(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'external.db'}"
    for command in (["create", "--tenant", "acme"], ["list"], ["revoke", "key_x"]):
        done = parvis(tmp_path, "keys", *command, PARVIS_DATABASE_URL=url)
        assert done.returncode == 1
        (line,) = done.stderr.strip().splitlines()
        assert line.startswith("parvis: error: ") and "`parvis db upgrade`" in line, line
    upgraded = parvis(tmp_path, "db", "upgrade", PARVIS_DATABASE_URL=url)
    assert upgraded.returncode == 0, upgraded.stderr
    assert parvis(tmp_path, "keys", "create", "--tenant", "acme", PARVIS_DATABASE_URL=url).returncode == 0


def test_worker_pool_processes_apply_the_torch_thread_setting(tmp_path: Path) -> None:
    """`python -m workers` with two pool processes: each logs torch.get_num_threads() after applying the
    setting (3, not the machine's default)."""
    env = {**client_env(tmp_path), "PARVIS_DATA_DIR": str(tmp_path / "data"), "PARVIS_WORKER_TORCH_THREADS": "3"}
    assert parvis(tmp_path, "db", "upgrade", PARVIS_DATA_DIR=env["PARVIS_DATA_DIR"]).returncode == 0
    log = tmp_path / "worker.log"
    with log.open("w") as out:
        worker = subprocess.Popen([sys.executable, "-m", "workers", "--concurrency", "2"], cwd=ROOT, env=env,
                                  stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        deadline = time.monotonic() + 120
        lines: list[str] = []
        while time.monotonic() < deadline and len(lines) < 2 and worker.poll() is None:
            time.sleep(0.5)
            lines = re.findall(r"worker process \d+: torch uses (\d+) thread\(s\)", log.read_text())
        assert lines == ["3", "3"], log.read_text()[-3000:]
    finally:
        worker.send_signal(signal.SIGTERM)
        with contextlib.suppress(subprocess.TimeoutExpired):
            worker.wait(timeout=20)
        with contextlib.suppress(ProcessLookupError):
            os.killpg(worker.pid, signal.SIGKILL)  # this test's worker and its pool children only
        worker.wait()
