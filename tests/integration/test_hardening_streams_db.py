"""Issue 15, items 2 and 7 and ETag polling, over real HTTP against real processes:

- many open event streams on the cluster API (PostgreSQL pool of 10 + 10) hold no connection between reads,
  plain polls keep answering, every stream gets its terminal event, and stream N+1 of a tenant gets 429;
- with its database refusing connections the API answers 503 `database_unavailable` + Retry-After on any
  route, readiness reports the database down, and requests succeed again once it is back (no restart);
- `GET /v1/jobs/{id}` (and the list) carry a strong ETag and answer 304 to a matching If-None-Match.
"""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

import httpx
import psycopg
import pytest

from tests.support.stack import POSTGRES_ADMIN_URL, Stack, wait_for

pytestmark = pytest.mark.integration

STREAMS = 25  # more than the API's whole pool (10 + 10 overflow)


def endless_spec() -> dict:
    """A job that runs until cancelled."""
    return {
        "method": "svgd",
        "target": {"kind": "gaussian", "mean": [0.0, 0.0], "cov": [[1.0, 0.0], [0.0, 1.0]]},
        "num_particles": 50,
        "steps": 1_000_000,
        "seed": 1,
    }


def database_connections(name: str) -> tuple[int, int]:
    """(all connections to the database, those busy: in a query or inside an open transaction), as
    PostgreSQL counts them (API and worker together)."""
    with psycopg.connect(POSTGRES_ADMIN_URL, autocommit=True) as admin:
        row = admin.execute(
            "SELECT count(*), count(*) FILTER (WHERE state <> 'idle') FROM pg_stat_activity "
            "WHERE datname = %s AND pid <> pg_backend_pid()", (name,)).fetchone()
    return int(row[0]), int(row[1])


def follow_events(base_url: str, key: str, job_id: str, on_first: Callable[[], None]) -> tuple[int, list[dict]]:
    """Read one job's event stream to its end: (HTTP status, the `job` events received)."""
    events: list[dict] = []
    with httpx.Client(base_url=base_url, timeout=httpx.Timeout(180), headers=bearer(key)) as client, \
            client.stream("GET", f"/v1/jobs/{job_id}/events", params={"poll_seconds": 1.0}) as response:
        for line in response.iter_lines():
            if line.startswith("data: "):
                events.append(json.loads(line[6:]))
                if len(events) == 1:
                    on_first()
        return response.status_code, events


def bearer(key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"} if key else {}


def create_key(stack: Stack, tenant: str) -> str:
    done = subprocess.run([sys.executable, "-m", "app.cli", "keys", "create", "--tenant", tenant], env=stack.env,
                          check=True, capture_output=True, text=True)
    return done.stdout.strip().splitlines()[-1]


def assert_problem(response: httpx.Response, status: int, code: str) -> None:
    assert response.status_code == status, response.text
    assert response.headers["content-type"] == "application/problem+json"
    assert response.json()["code"] == code


def test_open_event_streams_hold_no_connection_and_are_capped_per_tenant(
        make_stack: Callable[..., Stack]) -> None:
    """25 streams from three tenants (auth on, so each request also looks its key up in the database)."""
    cap = 9
    stack = make_stack("cluster", PARVIS_AUTH_ENABLED="true", PARVIS_MAX_STREAMS_PER_TENANT=str(cap))
    assert stack.database is not None
    stack.start_worker()
    keys = {tenant: create_key(stack, tenant) for tenant in ("acme", "bravo", "coda")}
    streams_of = {"acme": cap, "bravo": cap - 1, "coda": STREAMS - 2 * cap + 1}
    assert sum(streams_of.values()) == STREAMS
    jobs = {}
    for tenant, key in keys.items():
        response = stack.submit(endless_spec(), headers=bearer(key))
        assert response.status_code == 202, response.text
        jobs[tenant] = response.json()["id"]
    wait_for(lambda: stack.client.get(f"/v1/jobs/{jobs['acme']}", headers=bearer(keys["acme"])).json()["status"]
             == "running", 120, what="a job to run")

    streaming = threading.Semaphore(0)
    with ThreadPoolExecutor(STREAMS) as pool:
        followers = [pool.submit(follow_events, stack.base_url, keys[tenant], jobs[tenant], streaming.release)
                     for tenant, count in streams_of.items() for _ in range(count)]
        try:
            for _ in range(STREAMS):  # every stream has delivered its first event and is open
                assert streaming.acquire(timeout=120), stack.log_tail()

            # Plain polls are served while all the streams are open (they waited 30 s, then 500, before).
            for _ in range(5):
                for tenant, key in keys.items():
                    assert stack.client.get(f"/v1/jobs/{jobs[tenant]}", headers=bearer(key)).status_code == 200
                    assert stack.client.get("/v1/jobs", headers=bearer(key)).status_code == 200
            # No stream parks a connection: PostgreSQL sees the pool mostly idle (before, all of the API's 20
            # connections sat "idle in transaction" for the streams' lifetime and the rest of them waited).
            samples = []
            for _ in range(5):
                samples.append(database_connections(stack.database.name))
                time.sleep(0.2)
            busy = [count for _, count in samples]
            assert max(busy) < STREAMS // 2 and min(busy) <= 3, samples

            # One stream more than the cap for acme: 429 with a hint when to come back.
            extra = stack.client.get(f"/v1/jobs/{jobs['acme']}/events", headers=bearer(keys["acme"]))
            assert_problem(extra, 429, "too_many_streams")
            assert int(extra.headers["retry-after"]) > 0
            # The cap is per tenant: bravo, one under it, still gets its stream.
            with stack.client.stream("GET", f"/v1/jobs/{jobs['bravo']}/events",
                                     headers=bearer(keys["bravo"])) as response:
                assert response.status_code == 200
            # Another tenant's job, or a missing one, is a 404, cap or not.
            for job_id in (jobs["acme"], "job_missing"):
                assert_problem(stack.client.get(f"/v1/jobs/{job_id}/events", headers=bearer(keys["coda"])),
                               404, "not_found")
        finally:
            for tenant, key in keys.items():
                assert stack.client.post(f"/v1/jobs/{jobs[tenant]}/cancel", headers=bearer(key)).status_code == 202

        results = [follower.result(timeout=180) for follower in followers]
    for status, events in results:
        assert status == 200
        assert events[-1]["status"] == "cancelled", events[-1]

    # The slots are given back as the streams end: acme is served again (its job's single terminal event).
    def served() -> bool:
        response = stack.client.get(f"/v1/jobs/{jobs['acme']}/events", headers=bearer(keys["acme"]))
        return response.status_code == 200 and '"status": "cancelled"' in response.text

    wait_for(served, 30, interval=0.5, what="stream slots to be released")
    assert "QueuePool limit" not in stack.log_tail(400)


def test_database_down_answers_503_and_recovers_without_restart(make_stack: Callable[..., Stack]) -> None:
    stack = make_stack("cluster")
    job_id = stack.submit(endless_spec()).json()["id"]  # no worker: stays queued
    assert stack.client.get(f"/v1/jobs/{job_id}").status_code == 200
    # A stream open across the outage waits it out (heartbeats, no error) and still ends with the job.
    streaming = threading.Event()
    with ThreadPoolExecutor(1) as pool:
        follower = pool.submit(follow_events, stack.base_url, "", job_id, streaming.set)
        assert streaming.wait(60)
        take_database_down_and_back(stack, job_id)
        assert stack.client.post(f"/v1/jobs/{job_id}/cancel").status_code == 202
        status, events = follower.result(timeout=120)
    assert status == 200
    assert [event["status"] for event in events] == ["queued", "cancelled"]
    assert stack.api is not None and stack.api.poll() is None


def take_database_down_and_back(stack: Stack, job_id: str) -> None:
    assert stack.database is not None
    name = stack.database.name
    with psycopg.connect(POSTGRES_ADMIN_URL, autocommit=True) as admin:
        admin.execute(f'ALTER DATABASE "{name}" ALLOW_CONNECTIONS false')
        try:
            admin.execute("SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                          "WHERE datname = %s AND pid <> pg_backend_pid()", (name,))
            wait_for(lambda: database_connections(name)[0] == 0, 30, what="the API's connections to end")

            down = [
                stack.client.get(f"/v1/jobs/{job_id}"),
                stack.client.get("/v1/jobs"),
                stack.client.get(f"/v1/jobs/{job_id}/events"),
                stack.client.post(f"/v1/jobs/{job_id}/cancel"),
                stack.submit(endless_spec()),
                stack.client.get("/v1/samplers"),
            ]
            for response in down:
                assert_problem(response, 503, "database_unavailable")
                assert int(response.headers["retry-after"]) > 0
                assert "request_id" in response.json()
            ready = stack.client.get("/v1/health/ready")
            assert ready.status_code == 503
            assert ready.json()["checks"]["database"] == "unreachable"
            time.sleep(3)  # an outage over several reads of the open stream (it polls every second)
        finally:
            admin.execute(f'ALTER DATABASE "{name}" ALLOW_CONNECTIONS true')

    # Back without restarting the API: the pool pre-pings and reconnects.
    wait_for(lambda: stack.client.get(f"/v1/jobs/{job_id}").status_code == 200, 30, what="the API to recover")
    assert stack.job(job_id)["status"] == "queued"
    assert stack.client.get("/v1/jobs").status_code == 200
    assert stack.client.get("/v1/health/ready").json()["checks"]["database"] == "ok"


def test_job_polling_answers_304_while_nothing_changed(make_stack: Callable[..., Stack]) -> None:
    stack = make_stack("embedded")  # no worker: the job stays queued until cancelled
    job_id = stack.submit(endless_spec()).json()["id"]

    first = stack.client.get(f"/v1/jobs/{job_id}")
    second = stack.client.get(f"/v1/jobs/{job_id}")
    etag = first.headers["etag"]
    assert etag.startswith('"') and etag.endswith('"') and not etag.startswith("W/")
    assert second.headers["etag"] == etag and second.json() == first.json()

    unchanged = stack.client.get(f"/v1/jobs/{job_id}", headers={"If-None-Match": etag})
    assert unchanged.status_code == 304
    assert unchanged.content == b""
    assert unchanged.headers["etag"] == etag
    # A list of tags, weak or not, matches too; another tag does not.
    listed = stack.client.get(f"/v1/jobs/{job_id}", headers={"If-None-Match": f'"other", W/{etag}'})
    assert listed.status_code == 304
    assert stack.client.get(f"/v1/jobs/{job_id}", headers={"If-None-Match": '"other"'}).status_code == 200

    jobs_etag = stack.client.get("/v1/jobs").headers["etag"]
    assert stack.client.get("/v1/jobs", headers={"If-None-Match": jobs_etag}).status_code == 304

    assert stack.client.post(f"/v1/jobs/{job_id}/cancel").status_code == 202
    changed = stack.client.get(f"/v1/jobs/{job_id}", headers={"If-None-Match": etag})
    assert changed.status_code == 200
    assert changed.json()["status"] == "cancelled"
    assert changed.headers["etag"] != etag
    assert stack.client.get("/v1/jobs", headers={"If-None-Match": jobs_etag}).status_code == 200
    # A missing job is still a 404, whatever the tag.
    assert_problem(stack.client.get("/v1/jobs/job_missing", headers={"If-None-Match": "*"}), 404, "not_found")
