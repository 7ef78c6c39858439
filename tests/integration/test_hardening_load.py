"""Issue 15, items 3 and 5 (/sample part), against real API processes:

- a cold API (just restarted, torch not yet imported, generator not loaded) takes a burst of 40 concurrent
  `/sample` calls and 100 job polls without a single error (single-flight loading, no DB session held while
  drawing, draws in a bounded compute pool off the event loop and the request threadpool);
- `/sample` answers over `max_sample_bytes` are refused before any work (413 with the numbers), large `.npy`
  answers are streamed and byte-identical to the library's own draws;
- `parvis api --workers 2` serves one port from two processes that share no state but the database/store
  (a page token signed by one process is honoured by the other).
"""

from __future__ import annotations

import asyncio
import io
import os
import zipfile
from pathlib import Path

import httpx
import numpy as np
import pytest

from tests.support.stack import Stack, wait_for

pytestmark = pytest.mark.integration

DIM = 20
SAMPLE_N = 1000
MAX_SAMPLE_BYTES = 16 * 1024 * 1024  # npy of 100,000 × 20 (8 MB, two streamed slices) fits; JSON (~40 MB) not


@pytest.fixture(scope="module", params=["embedded", "cluster"])
def trained(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory):
    stack = Stack(request.param, tmp_path_factory.mktemp(f"load-{request.param}"),
                  {"PARVIS_MAX_SAMPLE_BYTES": str(MAX_SAMPLE_BYTES)})
    try:
        stack.migrate()
        stack.start_api()
        stack.start_worker()
        spec = {"method": "gpvi_exact", "target": {"kind": "gaussian", "mean": [0.5] * DIM,
                                                     "cov": np.eye(DIM).tolist()},
                "num_particles": 16, "steps": 50, "seed": 3}
        submitted = stack.submit(spec)
        assert submitted.status_code == 202, submitted.text
        job_id = submitted.json()["id"]
        job = stack.wait_status(job_id, {"succeeded", "failed"}, timeout=600)
        assert job["status"] == "succeeded", (job["error"], stack.log_tail())
        yield stack, job
    except BaseException:
        print(stack.log_tail())
        raise
    finally:
        stack.stop()


async def burst(base_url: str, sampler_id: str, job_id: str, samples: int, polls: int) -> list[tuple[str, int]]:
    """All requests at once, each on its own connection; (route, status) per request (599: no answer)."""
    limits = httpx.Limits(max_connections=samples + polls, max_keepalive_connections=0)
    async with httpx.AsyncClient(base_url=base_url, timeout=180, limits=limits) as client:
        async def one(route: str, method: str, url: str, **kwargs: object) -> tuple[str, int]:
            try:
                return route, (await client.request(method, url, **kwargs)).status_code
            except httpx.HTTPError:
                return route, 599

        calls = [one("sample", "POST", f"/v1/samplers/{sampler_id}/sample", json={"n": SAMPLE_N, "seed": i},
                     headers={"Accept": "application/x-npy"}) for i in range(samples)]
        calls += [one("poll", "GET", f"/v1/jobs/{job_id}") for _ in range(polls)]
        return await asyncio.gather(*calls)


def test_a_cold_api_takes_a_burst_of_samples_and_polls_without_errors(trained) -> None:
    stack, job = trained
    stack.stop_api()
    stack.start_api()  # returns once /health/live answers: torch is not imported yet, nothing is loaded
    outcomes = asyncio.run(burst(stack.base_url, job["sampler_id"], job["id"], samples=40, polls=100))
    failed = [(route, status) for route, status in outcomes if status != 200]
    assert not failed, (failed, stack.log_tail())
    assert wait_for(lambda: stack.client.get("/v1/health/ready").json()["checks"].get("warm"), 120,
                    what="the warm-up to finish")


def test_sample_size_cap_and_streamed_npy_are_the_librarys_draws(trained) -> None:
    import torch

    from inference_core.samplers import load

    stack, job = trained
    url = f"/v1/samplers/{job['sampler_id']}/sample"
    npy = {"Accept": "application/x-npy"}
    big = stack.client.post(url, json={"n": 100_000, "seed": 11}, headers=npy)
    assert big.status_code == 200, big.text
    assert int(big.headers["content-length"]) == len(big.content)
    drawn = np.load(io.BytesIO(big.content), allow_pickle=False)
    assert drawn.dtype == np.float32 and drawn.shape == (100_000, DIM)
    # The same bytes as the library's draws from the downloaded sampler (one intra-op thread, as the API).
    archive = stack.client.get(f"/v1/samplers/{job['sampler_id']}/download").content
    torch.set_num_threads(1)
    expected = load(archive).sample(100_000, 11).numpy()
    buffer = io.BytesIO()
    np.save(buffer, expected, allow_pickle=False)
    assert big.content == buffer.getvalue()
    assert zipfile.is_zipfile(io.BytesIO(archive))
    # JSON of the same answer is ~20 bytes a value: over the cap, refused before any work, with the numbers.
    refused = stack.client.post(url, json={"n": 100_000, "seed": 11})
    assert refused.status_code == 413, refused.text
    problem = refused.json()
    assert problem["code"] == "limit_exceeded" and str(MAX_SAMPLE_BYTES) in problem["detail"]
    assert "application/x-npy" in problem["detail"]
    # Small JSON answers still work and agree with the .npy ones.
    small = stack.client.post(url, json={"n": 7, "seed": 11}).json()
    np.testing.assert_array_equal(np.asarray(small["samples"], dtype=np.float32), load(archive).sample(7, 11).numpy())


def test_two_api_processes_serve_one_port_statelessly(tmp_path: Path) -> None:
    stack = Stack("embedded", tmp_path / "workers")
    try:
        stack.migrate()
        stack.start_api("--workers", "2")
        for seed in range(3):
            assert stack.submit({"method": "svgd", "target": {"kind": "gaussian", "mean": [0.0], "cov": [[1.0]]},
                                 "num_particles": 8, "steps": 10, "seed": seed}).status_code == 202

        def fresh(path: str) -> httpx.Response:  # a new connection, so the kernel may pick either process
            with httpx.Client(base_url=stack.base_url, timeout=30) as client:
                return client.get(path)

        pids: set[int] = set()
        wait_for(lambda: pids.add(fresh("/v1/health/live").json()["checks"]["pid"]) or len(pids) == 2, 120,
                 interval=0.05, what="both API processes to answer")
        assert stack.api is not None and stack.api.pid not in pids and all(pid != os.getpid() for pid in pids)
        # A page token signed by one process is honoured by the other (the secret key is shared via data_dir).
        first = fresh("/v1/jobs?page_size=1").json()
        token = first["next_page_token"]
        answered: dict[int, list[str]] = {}

        def page_two_from_both() -> bool:
            # One kept-alive connection: both requests reach the same process.
            with httpx.Client(base_url=stack.base_url, timeout=30, limits=httpx.Limits(max_connections=1)) as client:
                pid = client.get("/v1/health/live").json()["checks"]["pid"]
                response = client.get(f"/v1/jobs?page_size=1&page_token={token}")
            assert response.status_code == 200, response.text
            answered[pid] = [j["id"] for j in response.json()["jobs"]]
            return len(answered) == 2

        wait_for(page_two_from_both, 120, interval=0.05, what="page two from both processes")
        pages = list(answered.values())
        assert pages[0] == pages[1] and len(pages[0]) == 1 and pages[0][0] != first["jobs"][0]["id"]
    except BaseException:
        print(stack.log_tail())
        raise
    finally:
        stack.stop()
