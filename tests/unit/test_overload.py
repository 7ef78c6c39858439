"""Overload is shed, not queued (issue 43, item 2): past each bound — requests in flight per process, calls
waiting for a compute-pool thread, the wait for a database connection — the API answers at once with 503
`overloaded` and Retry-After, and takes work again as soon as there is room."""

from __future__ import annotations

import asyncio
import threading
import time

import httpx
import pytest
from starlette.applications import Starlette
from starlette.responses import PlainTextResponse
from starlette.routing import Route

from app.api.compute import ComputePool
from app.api.middleware import InFlightLimitMiddleware
from app.api.problems import Problem


def test_the_compute_pool_sheds_past_its_queue_limit() -> None:
    pool = ComputePool(1, queue_limit=1)
    gate = threading.Event()

    async def scenario() -> None:
        running = asyncio.ensure_future(pool.run(gate.wait, 30))
        queued = asyncio.ensure_future(pool.run(lambda: "queued"))
        await asyncio.sleep(0.05)
        started = time.monotonic()
        with pytest.raises(Problem) as refused:
            await pool.run(lambda: "third")
        assert time.monotonic() - started < 0.5
        assert (refused.value.status, refused.value.code) == (503, "overloaded")
        assert refused.value.headers == {"Retry-After": "1"}
        gate.set()
        assert await running is True and await queued == "queued"
        assert await pool.run(lambda: "room again") == "room again"
        assert pool.pending == 0

    try:
        asyncio.run(scenario())
    finally:
        gate.set()
        pool.shutdown()


def test_requests_past_the_in_flight_limit_are_refused_at_once() -> None:
    release = asyncio.Event()

    async def slow(request):  # noqa: ANN001, ANN202
        await release.wait()
        return PlainTextResponse("done")

    async def health(request):  # noqa: ANN001, ANN202
        return PlainTextResponse("ok")

    app = InFlightLimitMiddleware(Starlette(routes=[Route("/v1/slow", slow), Route("/v1/health/live", health)]),
                                  limit=2)

    async def scenario() -> None:
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://test") as client:
            held = [asyncio.ensure_future(client.get("/v1/slow")) for _ in range(2)]
            await asyncio.sleep(0.05)
            started = time.monotonic()
            refused = await client.get("/v1/slow")
            assert time.monotonic() - started < 0.5
            assert refused.status_code == 503 and refused.headers["retry-after"] == "1"
            assert refused.headers["content-type"] == "application/problem+json"
            assert refused.json()["code"] == "overloaded"
            assert (await client.get("/v1/health/live")).status_code == 200  # probes are never shed
            release.set()
            assert [r.status_code for r in await asyncio.gather(*held)] == [200, 200]
            assert (await client.get("/v1/slow")).status_code == 200
            assert app.in_flight == 0

    asyncio.run(scenario())


def test_a_request_that_cannot_get_a_database_connection_in_time_is_shed(make_client) -> None:
    client, _ = make_client(db_wait_seconds=0.05)
    client.app.state.session_gate = asyncio.Semaphore(0)  # every connection busy
    started = time.monotonic()
    refused = client.get("/v1/jobs")
    assert time.monotonic() - started < 2
    assert refused.status_code == 503 and refused.json()["code"] == "overloaded"
    assert refused.headers["retry-after"] == "1"
    client.app.state.session_gate = asyncio.Semaphore(1)
    assert client.get("/v1/jobs").status_code == 200


def test_concurrent_uploads_share_one_decoding_budget(make_client) -> None:
    from app.api.decode_budget import DecodeBudget

    budget = DecodeBudget(100)
    assert DecodeBudget.cost(10, "text/csv", 1000, fields=4) == 96 and DecodeBudget.cost(10, "application/x-npz", 1000) == 2000
    with budget.reserve(60):
        with pytest.raises(Problem) as refused, budget.reserve(60):
            pass
        assert (refused.value.status, refused.value.code) == (503, "overloaded")
        with budget.reserve(40):
            assert budget.reserved == 100
    assert budget.reserved == 0
    with budget.reserve(10**9):  # one upload alone always fits
        assert budget.reserved == 100

    client, _ = make_client()
    body = {"X": [[1.0], [2.0], [3.0]], "y": [1.0, 2.0, 3.0]}
    held = client.app.state.decode_budget
    with held.reserve(held.total_bytes):  # uploads being decoded hold the whole budget
        refused = client.post("/v1/datasets", json=body)
        assert refused.status_code == 503 and refused.json()["code"] == "overloaded"
        assert refused.headers["retry-after"] == "1"
    assert client.post("/v1/datasets", json=body).status_code == 201
    assert held.reserved == 0
