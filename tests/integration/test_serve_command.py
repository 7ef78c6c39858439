"""`parvis serve`: the README's embedded default, as a user runs it."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import httpx
import psutil
import pytest

from tests.support.serve import client_env
from tests.support.stack import free_port, wait_for

pytestmark = pytest.mark.integration


def test_serve_runs_a_job_and_stops_cleanly(tmp_path: Path) -> None:
    port = free_port()
    log = tmp_path / "serve.log"
    with open(log, "wb") as out:
        serve = subprocess.Popen(
            [sys.executable, "-m", "app.cli", "serve", "--port", str(port), "--data-dir", str(tmp_path / "data")],
            env=client_env(tmp_path), stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
    client = httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=30)
    try:
        def ready() -> bool:
            try:
                return client.get("/v1/health/ready").status_code == 200
            except httpx.TransportError:
                return False

        wait_for(ready, 90, what="parvis serve to become ready")
        text = log.read_text()
        assert f"Parvis serving at http://127.0.0.1:{port}" in text
        assert "authentication: OFF" in text
        spec = {"method": "svgd", "target": {"kind": "gaussian", "mean": [0, 3], "cov": [[2, -0.5], [-0.5, 1]]},
                "num_particles": 100, "steps": 300}
        job_id = client.post("/v1/jobs", json=spec).json()["id"]
        job = wait_for(lambda: (j := client.get(f"/v1/jobs/{job_id}").json())["status"] in
                       {"succeeded", "failed"} and j, 90, what="the job")
        assert job["status"] == "succeeded", log.read_text()
        assert (tmp_path / "data" / "parvis.db").exists()
        assert (tmp_path / "data" / "artifacts" / "jobs" / job_id / "particles.npy").exists()

        family = [serve.pid, *(p.pid for p in psutil.Process(serve.pid).children(recursive=True))]
        assert len(family) >= 3, "expected the API process, the worker and its pool child"
        serve.send_signal(signal.SIGTERM)
        assert serve.wait(timeout=60) == 0
        wait_for(lambda: not any(psutil.pid_exists(pid) and psutil.Process(pid).status() != "zombie"
                                 for pid in family), 30, what="every serve process to exit")
        assert "Parvis stopped." in log.read_text()
    finally:
        client.close()
        if serve.poll() is None:
            os.killpg(serve.pid, signal.SIGKILL)


def test_serve_refuses_a_public_address_without_auth(tmp_path: Path) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "app.cli", "serve", "--host", "0.0.0.0", "--port", str(free_port()),
         "--data-dir", str(tmp_path / "data")],
        env=client_env(tmp_path), capture_output=True, text=True, timeout=60)
    assert result.returncode == 2
    assert "refusing to serve on 0.0.0.0 without authentication" in result.stderr
