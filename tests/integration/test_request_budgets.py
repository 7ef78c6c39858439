"""Issue 43, item 1, over real HTTP against a real API process: requests that evaluate a target over a large
uploaded data set (the density grid, /targets/validate) run concurrently while the API process's RSS (psutil) is
sampled; its growth stays within the documented budget (`request_memory_bytes` × requests in the compute pool,
plus allocator slack), every answer is a 200 or a documented 413, and work over `max_evaluation_values` is
refused up front. Without the chunking each of these requests would hold gigabytes (points × rows × values)."""

from __future__ import annotations

import contextlib
import io
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import numpy as np
import psutil
import pytest

from tests.support.stack import Stack, assert_problem, wait_for

pytestmark = pytest.mark.integration

BUDGET = 64 * 1024 * 1024
POOL = 4
ROWS = 300_000
UPLOAD_CAP = 32 * 1024 * 1024  # decompressed bytes of one upload; the process's decoding budget is twice it
SLACK = 128 * 1024 * 1024  # allocator and interpreter slack, the data sets' own copies (5 MB each)


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory):  # noqa: ANN201
    stack = Stack("embedded", tmp_path_factory.mktemp("budgets"), {
        "PARVIS_REQUEST_MEMORY_BYTES": str(BUDGET), "PARVIS_SAMPLE_CONCURRENCY": str(POOL),
        "PARVIS_MAX_DATASET_DECOMPRESSED_BYTES": str(UPLOAD_CAP), "PARVIS_UPLOAD_DECODE_BUDGET_BYTES": str(2 * UPLOAD_CAP)})
    try:
        stack.migrate()
        stack.start_api()
        wait_for(lambda: stack.client.get("/v1/health/ready").json()["checks"].get("warm"), 120, what="warm-up")
        yield stack
    finally:
        stack.stop()


def tree_rss(pid: int) -> int:
    process = psutil.Process(pid)
    total = 0
    for member in [process, *process.children(recursive=True)]:
        with contextlib.suppress(psutil.NoSuchProcess):
            total += member.memory_info().rss
    return total


class PeakRss:
    """The largest RSS of a process tree, sampled every 20 ms while the block runs."""

    def __init__(self, pid: int):
        self.pid, self.peak, self._stop = pid, 0, threading.Event()

    def __enter__(self) -> PeakRss:
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()
        return self

    def _run(self) -> None:
        while not self._stop.is_set():
            self.peak = max(self.peak, tree_rss(self.pid))
            time.sleep(0.02)

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self.thread.join()


def upload(stack: Stack) -> str:
    rng = np.random.default_rng(0)
    x = rng.normal(size=(ROWS, 1))
    buffer = io.BytesIO()
    np.savez(buffer, X=x, y=2.0 * x[:, 0] - 1.0 + 0.1 * rng.normal(size=ROWS))
    response = stack.client.post("/v1/datasets", content=buffer.getvalue(),
                                 headers={"Content-Type": "application/x-npz"})
    assert response.status_code == 201, response.text
    return response.json()["id"]


def test_concurrent_target_evaluations_stay_within_the_memory_budget(stack: Stack) -> None:
    dataset = upload(stack)
    job = stack.submit({"method": "svgd", "steps": 5, "num_particles": 4,
                        "target": {"kind": "bayesian_linear_regression", "dataset": dataset, "bias": True}})
    assert job.status_code == 202, job.text
    density = f"/v1/jobs/{job.json()['id']}/density"
    bounds = {"x_min": -3, "x_max": 3, "y_min": -3, "y_max": 3}
    bnn = {"kind": "bnn", "dataset": dataset, "hidden": [50]}
    dim = 1 * 50 + 50 + 50 + 1 + 1  # weights, biases and the noise's log γ
    validate = {"target": bnn, "points": np.zeros((6, dim)).tolist(), "dtype": "float64"}

    def call(kind: str) -> httpx.Response:
        with httpx.Client(base_url=stack.base_url, timeout=600) as client:
            if kind == "density":
                return client.get(density, params={**bounds, "grid": 24})
            return client.post("/v1/targets/validate", json=validate)

    baseline = tree_rss(stack.api.pid)
    with PeakRss(stack.api.pid) as rss, ThreadPoolExecutor(8) as pool:
        answers = list(pool.map(call, ["density", "validate"] * POOL))
    for answer in answers:
        assert answer.status_code == 200, answer.text
    grid = answers[0].json()
    assert len(grid["log_prob"]) == 24 and all(v is not None for row in grid["log_prob"] for v in row)
    assert all(v is not None for v in answers[1].json()["log_prob"])
    growth = rss.peak - baseline
    print(f"API RSS growth under {POOL} concurrent evaluations: {growth / 2**20:.0f} MiB")
    assert growth < POOL * BUDGET + SLACK, f"RSS grew by {growth / 2**20:.0f} MiB"


def test_work_over_the_cap_is_refused_up_front(stack: Stack) -> None:
    dataset = upload(stack)
    job = stack.submit({"method": "svgd", "steps": 5, "num_particles": 4,
                        "target": {"kind": "bayesian_linear_regression", "dataset": dataset, "bias": True}})
    started = time.monotonic()
    answer = stack.client.get(f"/v1/jobs/{job.json()['id']}/density",
                              params={"x_min": -1, "x_max": 1, "y_min": -1, "y_max": 1, "grid": 200})
    body = assert_problem(answer, 413, "limit_exceeded")  # 40,000 points × 300,000 rows × 2 values > 2³²
    assert "PARVIS_MAX_EVALUATION_VALUES" in body["detail"]
    assert time.monotonic() - started < 30


def test_the_budget_is_a_documented_setting() -> None:
    root = Path(__file__).resolve().parents[2]
    readme, architecture = (root / "README.md").read_text(), (root / "docs" / "architecture.md").read_text()
    for name in ("PARVIS_REQUEST_MEMORY_BYTES", "PARVIS_MAX_EVALUATION_VALUES"):
        assert name in readme and name in architecture


def test_concurrent_uploads_are_decoded_within_one_shared_budget(stack: Stack) -> None:
    """Six ~100 KB `.npz` bodies that each decompress to 30 MiB (under the per-upload cap) sent at once: each
    reserves twice the cap from the shared budget, so one decodes at a time and the others are told 503
    `overloaded` with Retry-After; retried after it, every upload is stored (nothing lost) while the API grows
    by about one decode, not six."""
    buffer = io.BytesIO()
    rows = 1_900_000
    np.savez_compressed(buffer, X=np.zeros((rows, 1)), y=np.zeros(rows))
    body = buffer.getvalue()
    assert len(body) < 200_000

    def upload_until_stored(_: int) -> tuple[int, int]:
        refusals = 0
        with httpx.Client(base_url=stack.base_url, timeout=120) as client:
            while True:
                answer = client.post("/v1/datasets", content=body, headers={"Content-Type": "application/x-npz"})
                if answer.status_code != 503:
                    return answer.status_code, refusals
                assert answer.json()["code"] == "overloaded" and answer.headers["retry-after"] == "1"
                refusals += 1
                time.sleep(float(answer.headers["retry-after"]) * 0.2)

    baseline = tree_rss(stack.api.pid)
    with PeakRss(stack.api.pid) as rss, ThreadPoolExecutor(6) as pool:
        outcomes = list(pool.map(upload_until_stored, range(6)))
    assert [status for status, _ in outcomes] == [201] * 6
    assert sum(refused for _, refused in outcomes) > 0  # they did not all decode at once
    growth = rss.peak - baseline
    print(f"API RSS growth under 6 concurrent uploads: {growth / 2**20:.0f} MiB")
    assert growth < 2 * UPLOAD_CAP * 2 + SLACK, f"RSS grew by {growth / 2**20:.0f} MiB"


def test_concurrent_corrections_weigh_their_proposals_within_the_budget(stack: Stack) -> None:
    """/sample with `correct` against a regression on uci:protein (about 41,000 training rows): each request's
    ~1,400 proposals are weighed by the full-data log-likelihood, ~3 GB of intermediate values if taken whole,
    in chunks under the 64 MiB budget; four at once keep the API's growth within the pool's budgets."""
    worker = stack.start_worker()
    try:
        spec = {"method": "gpvi_exact", "num_particles": 32, "steps": 30,
                "target": {"kind": "bayesian_linear_regression", "dataset": "uci:protein", "bias": True}}
        job = stack.succeeded(spec, timeout=600)
    finally:
        stack.kill_worker(worker)
    url = f"/v1/samplers/{job['sampler_id']}/sample"
    body = {"n": 700, "seed": 3, "correct": "psis", "proposals": 1400, "return": ["log_weights"]}

    def call(seed: int) -> httpx.Response:
        with httpx.Client(base_url=stack.base_url, timeout=600) as client:
            return client.post(url, json={**body, "seed": seed})

    baseline = tree_rss(stack.api.pid)
    with PeakRss(stack.api.pid) as rss, ThreadPoolExecutor(POOL) as pool:
        answers = list(pool.map(call, range(POOL)))
    for answer in answers:
        assert answer.status_code == 200, answer.text
        assert len(answer.json()["log_weights"]) == body["n"]
        assert all(np.isfinite(answer.json()["log_weights"]))
    growth = rss.peak - baseline
    print(f"API RSS growth under {POOL} concurrent corrections: {growth / 2**20:.0f} MiB")
    assert growth < POOL * BUDGET + SLACK, f"RSS grew by {growth / 2**20:.0f} MiB"
