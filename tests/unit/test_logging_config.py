"""The JSON log formatter and the log context (request/job ids), through real loggers and handlers."""

from __future__ import annotations

import asyncio
import io
import json
import logging
from collections.abc import Iterator

import pytest

from service.logging_config import JsonFormatter, bind_log_context, current_log_context, log_context


@pytest.fixture
def captured() -> Iterator[tuple[logging.Logger, io.StringIO]]:
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.setFormatter(JsonFormatter())
    logger = logging.getLogger("parvis.test.json")
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    logger.propagate = False
    yield logger, stream
    logger.removeHandler(handler)


def lines(stream: io.StringIO) -> list[dict]:
    return [json.loads(line) for line in stream.getvalue().splitlines()]


def test_a_line_has_the_base_fields_the_context_and_extras(captured) -> None:
    logger, stream = captured
    with log_context(job_id="job_1", tenant="acme"):
        logger.info("step %d of %d", 3, 10, extra={"steps_per_s": 12.5})
    logger.warning("outside")
    inside, outside = lines(stream)
    assert inside["message"] == "step 3 of 10" and inside["level"] == "INFO"
    assert inside["logger"] == "parvis.test.json" and inside["ts"].endswith("Z")
    assert (inside["job_id"], inside["tenant"], inside["steps_per_s"]) == ("job_1", "acme", 12.5)
    assert "job_id" not in outside and outside["level"] == "WARNING"


def test_an_exception_is_one_exc_field(captured) -> None:
    logger, stream = captured
    try:
        raise RuntimeError("disk on fire")
    except RuntimeError:
        logger.exception("could not store %s", "particles.npy")
    (line,) = lines(stream)  # the traceback stays inside the one JSON line
    assert line["message"] == "could not store particles.npy" and line["level"] == "ERROR"
    assert "Traceback" in line["exc"] and "RuntimeError: disk on fire" in line["exc"]


def test_nested_contexts_restore_what_they_found() -> None:
    with log_context(request_id="r1"):
        with log_context(job_id="j1"):
            bind_log_context(tenant="t1")
            assert current_log_context() == {"request_id": "r1", "job_id": "j1", "tenant": "t1"}
        assert current_log_context() == {"request_id": "r1"}
    assert current_log_context() == {}


def test_concurrent_requests_keep_their_own_ids(captured) -> None:
    from starlette.concurrency import run_in_threadpool

    logger, stream = captured

    async def request(request_id: str) -> None:
        bind_log_context(request_id=request_id)  # as RequestIdMiddleware does, in the request's own task
        await asyncio.sleep(0.01)
        logger.info("handled")
        await run_in_threadpool(logger.info, "in a sync endpoint")  # how Starlette runs a sync endpoint

    async def main() -> None:
        await asyncio.gather(*(request(f"req-{i}") for i in range(20)))

    asyncio.run(main())
    seen = sorted((line["request_id"], line["message"]) for line in lines(stream))
    assert seen == sorted((f"req-{i}", message) for i in range(20) for message in ("handled", "in a sync endpoint"))
    assert current_log_context() == {}  # nothing leaked into the caller
