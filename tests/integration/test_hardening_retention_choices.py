"""Issue 15, retention: a client-chosen expiry (`retention_seconds` on submit and upload, bounded by the tenant's
maximum; samplers inherit their job's), an idempotent replay of an expired job answers 410, and byte deletions
that fail are retried by later sweeps. Real API and worker processes over HTTP (SQLite + filesystem queue)."""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from datetime import datetime
from pathlib import Path

import pytest
from sqlalchemy import select

from service.models import PendingDeletion
from tests.integration.test_retention_metrics import GENERATOR_SPEC, engine_of, folder
from tests.support.stack import assert_problem, wait_for

pytestmark = pytest.mark.integration

DAY = 86_400


def seconds_between(later: str, earlier: str) -> float:
    return (datetime.fromisoformat(later) - datetime.fromisoformat(earlier)).total_seconds()


def test_client_chosen_expiry_is_bounded_and_inherited(make_stack) -> None:
    stack = make_stack("embedded", PARVIS_RETENTION_DAYS="1", PARVIS_SWEEP_INTERVAL_SECONDS="3600")
    # Over the tenant's maximum (its retention, 1 day): 422, nothing stored.
    assert_problem(stack.client.post("/v1/jobs", json=GENERATOR_SPEC, params={"retention_seconds": DAY + 1}),
                   422, "retention_too_long")
    assert_problem(stack.client.post("/v1/datasets", json={"X": [[1.0]]}, params={"retention_seconds": DAY + 1}),
                   422, "retention_too_long")
    assert stack.client.get("/v1/jobs").json()["jobs"] == []
    assert stack.client.get("/v1/datasets").json()["datasets"] == []
    assert stack.client.post("/v1/jobs", json=GENERATOR_SPEC, params={"retention_seconds": 0}).status_code == 422

    dataset = stack.client.post("/v1/datasets", json={"X": [[1.0], [2.0]]}, params={"retention_seconds": 600})
    assert dataset.status_code == 201, dataset.text
    assert abs(seconds_between(dataset.json()["expires_at"], dataset.json()["created_at"]) - 600) < 5
    default = stack.client.post("/v1/datasets", json={"X": [[1.0], [2.0]]}).json()
    assert abs(seconds_between(default["expires_at"], default["created_at"]) - DAY) < 5

    stack.start_worker()
    submitted = stack.submit(GENERATOR_SPEC, params={"retention_seconds": DAY})  # the maximum itself is allowed
    assert submitted.status_code == 202, submitted.text
    short = stack.submit({**GENERATOR_SPEC, "seed": 2}, params={"retention_seconds": 20})
    assert short.status_code == 202, short.text
    assert abs(seconds_between(short.json()["expires_at"], short.json()["created_at"]) - 20) < 2
    job = stack.wait_status(short.json()["id"], {"succeeded", "failed"}, timeout=300)
    assert job["status"] == "succeeded", (job["error"], stack.log_tail())
    sampler = stack.client.get(f"/v1/samplers/{job['sampler_id']}").json()
    assert sampler["expires_at"] == job["expires_at"]  # the sampler inherits its job's expiry
    # Time does the rest: both answer 410 once the 20 s are over.
    wait_for(lambda: stack.client.get(f"/v1/jobs/{job['id']}").status_code == 410, 60, interval=0.5,
             what="the job to expire")
    assert_problem(stack.client.get(f"/v1/samplers/{job['sampler_id']}"), 410, "expired")
    assert stack.job(submitted.json()["id"])["status"] in {"queued", "running", "succeeded"}


def test_a_maximum_above_the_default_lets_clients_keep_longer(make_stack) -> None:
    stack = make_stack("embedded", PARVIS_RETENTION_DAYS="1", PARVIS_MAX_RETENTION_DAYS="7")
    longer = stack.client.post("/v1/datasets", json={"X": [[1.0]]}, params={"retention_seconds": 3 * DAY})
    assert longer.status_code == 201, longer.text
    assert abs(seconds_between(longer.json()["expires_at"], longer.json()["created_at"]) - 3 * DAY) < 5
    assert_problem(stack.client.post("/v1/datasets", json={"X": [[1.0]]}, params={"retention_seconds": 8 * DAY}),
                   422, "retention_too_long")


def test_an_idempotent_replay_of_an_expired_job_answers_410(make_stack) -> None:
    stack = make_stack("embedded", PARVIS_SWEEP_INTERVAL_SECONDS="3600")
    stack.start_worker()
    key = {"Idempotency-Key": "expiring-submit"}
    first = stack.submit(GENERATOR_SPEC, headers=key, params={"retention_seconds": 15})
    assert first.status_code == 202, first.text
    job_id = first.json()["id"]
    assert stack.wait_status(job_id, {"succeeded", "failed"}, timeout=300)["status"] == "succeeded"
    replay = stack.submit(GENERATOR_SPEC, headers=key, params={"retention_seconds": 15})
    if replay.status_code == 200:  # still within its 15 s: the same job
        assert replay.json()["id"] == job_id
    wait_for(lambda: stack.client.get(f"/v1/jobs/{job_id}").status_code == 410, 60, interval=0.5,
             what="the job to expire")
    problem = assert_problem(stack.submit(GENERATOR_SPEC, headers=key), 410, "expired")
    assert job_id in problem["detail"]
    assert [j["id"] for j in stack.client.get("/v1/jobs").json()["jobs"]] == []  # nothing new was created


CHATTR = shutil.which("chattr")


def refuse_deletions(path: Path, refuse: bool) -> bool:
    """Make the folder's entries undeletable (or deletable again) by the service's processes: read-only for an
    ordinary user, immutable (chattr, ext4-like file systems) for root, whom permissions do not stop."""
    if os.geteuid() != 0:
        path.chmod(0o555 if refuse else 0o755)
        return True
    return CHATTR is not None and subprocess.run([CHATTR, "+i" if refuse else "-i", str(path)],
                                                 capture_output=True).returncode == 0


def test_failed_byte_deletions_are_retried_by_later_sweeps(make_stack, tmp_path: Path) -> None:
    """The store refuses to delete a job's folder when the sweeper deletes the expired job: the row goes, the
    folder stays, recorded as pending; once the store can delete it, a later sweep does."""
    probe = tmp_path / "probe"
    probe.mkdir()
    if not refuse_deletions(probe, True):
        pytest.skip("cannot make a folder undeletable here (root without chattr +i support)")
    refuse_deletions(probe, False)

    stack = make_stack("embedded", PARVIS_SWEEP_INTERVAL_SECONDS="0.5")
    stack.start_worker()
    engine = engine_of(stack)
    job_folder = None
    try:
        # long enough for the job to finish before it expires on a loaded machine (8 s expired it first in CI)
        submitted = stack.submit(GENERATOR_SPEC, params={"retention_seconds": 30})
        job = stack.wait_status(submitted.json()["id"], {"succeeded", "failed"}, timeout=300)
        assert job["status"] == "succeeded", (job["error"], stack.log_tail())
        job_folder = folder(stack, "jobs", job["id"])
        assert (job_folder / "particles.npy").is_file()
        assert refuse_deletions(job_folder, True)

        wait_for(lambda: stack.client.get(f"/v1/jobs/{job['id']}").status_code == 404, 120, interval=0.2,
                 what="the expired job to be swept")
        with engine.connect() as conn:
            pending = wait_for(lambda: conn.execute(select(PendingDeletion)).all(), 10, what="a pending record")
        assert f"jobs/{job['id']}" in {row.prefix for row in pending}
        assert (job_folder / "particles.npy").is_file()  # the store refused
        time.sleep(2)  # several sweeps fail again; the record stays and counts them
        with engine.connect() as conn:
            row = conn.execute(select(PendingDeletion).where(PendingDeletion.prefix == f"jobs/{job['id']}")).one()
        assert row.attempts >= 2 and "PermissionError" in row.last_error, row

        assert refuse_deletions(job_folder, False)
        wait_for(lambda: not job_folder.exists(), 30, interval=0.2, what="a later sweep to delete the bytes")
        with engine.connect() as conn:
            wait_for(lambda: not conn.execute(select(PendingDeletion)).all(), 10, what="the record to go")
    except BaseException:
        print(stack.log_tail())
        raise
    finally:
        if job_folder is not None and job_folder.exists():
            refuse_deletions(job_folder, False)
        engine.dispose()
