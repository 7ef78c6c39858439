"""Issue 15: the per-tenant cap on open event streams holds across API processes on the cluster shape (Redis):
two API processes on one database and broker, cap 3. Whichever process the 4th stream reaches, it gets 429;
closing a stream frees a slot for the other process; a process killed with -9 gives its slots back within
`PARVIS_STREAM_SLOT_TTL_SECONDS`. Real uvicorn processes, Redis, PostgreSQL, HTTP."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
from collections.abc import Callable, Iterator

import httpx
import pytest

from tests.support.stack import Stack, free_port, wait_for

pytestmark = pytest.mark.integration

CAP = 3
TTL_SECONDS = 3.0


class Streams:
    """Event streams held open (headers received, body unread) against one API process."""

    def __init__(self, base_url: str, job_id: str):
        self.base_url = base_url
        self.url = f"/v1/jobs/{job_id}/events"
        self.open: list[tuple[httpx.Client, httpx.Response]] = []

    def try_open(self) -> int:
        client = httpx.Client(base_url=self.base_url, timeout=30)
        response = client.send(client.build_request("GET", self.url, params={"poll_seconds": 0.2}), stream=True)
        if response.status_code == 200:
            self.open.append((client, response))
        else:
            response.read()
            assert response.headers["content-type"] == "application/problem+json"
            assert response.json()["code"] == "too_many_streams" and int(response.headers["retry-after"]) > 0
            response.close()
            client.close()
        return response.status_code

    def close_one(self) -> None:
        client, response = self.open.pop()
        response.close()
        client.close()

    def close_all(self) -> None:
        while self.open:
            with contextlib.suppress(Exception):
                self.close_one()


@pytest.fixture
def second_api(make_stack: Callable[..., Stack]) -> Iterator[tuple[Stack, subprocess.Popen, str]]:
    stack = make_stack("cluster", PARVIS_MAX_STREAMS_PER_TENANT=str(CAP),
                       PARVIS_STREAM_SLOT_TTL_SECONDS=str(TTL_SECONDS))
    port = free_port()
    other = stack._spawn(["-m", "app.cli", "api", "--port", str(port)], "api-b.log")
    base_url = f"http://127.0.0.1:{port}"

    def live() -> bool:
        try:
            return httpx.get(f"{base_url}/v1/health/live", timeout=5).status_code == 200
        except httpx.TransportError:
            return False

    try:
        wait_for(live, 30, what="the second API process")
        yield stack, other, base_url
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(other.pid, signal.SIGKILL)
        other.wait(timeout=10)


def test_stream_cap_is_shared_by_api_processes(second_api: tuple[Stack, subprocess.Popen, str]) -> None:
    stack, other, other_url = second_api
    job_id = stack.submit({"method": "svgd", "target": {"kind": "gaussian", "mean": [0.0], "cov": [[1.0]]},
                           "num_particles": 8, "steps": 10, "seed": 1}).json()["id"]  # no worker: stays queued
    a, b = Streams(stack.base_url, job_id), Streams(other_url, job_id)
    try:
        assert [a.try_open(), a.try_open(), b.try_open()] == [200, 200, 200]
        # The tenant is at its cap on both processes, whichever one the next stream reaches.
        assert a.try_open() == 429 and b.try_open() == 429
        # A stream closed on A frees a slot that B can take.
        a.close_one()
        wait_for(lambda: b.try_open() == 200, 10, interval=0.2, what="the closed stream's slot to be freed")
        assert a.try_open() == 429 and b.try_open() == 429

        # B (holding two streams) killed with -9 gives nothing back itself: its slots lapse within one TTL.
        os.killpg(other.pid, signal.SIGKILL)
        other.wait(timeout=10)
        killed = time.monotonic()
        b.close_all()
        for _ in range(2):  # each of B's slots, leased at its own time
            wait_for(lambda: a.try_open() == 200, TTL_SECONDS + 5 - (time.monotonic() - killed), interval=0.2,
                     what="the killed process's slots to lapse")
        assert a.try_open() == 429  # and no more
        # Streams held open longer than the TTL keep their slots (renewed while they are read).
        time.sleep(2 * TTL_SECONDS)
        assert a.try_open() == 429
    finally:
        a.close_all()
        b.close_all()
