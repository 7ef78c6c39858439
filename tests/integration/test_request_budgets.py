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


SHED = (503, "overloaded")  # documented for every route here: the upload decoding budget, the compute queue
# What each hostile kind must finally answer (after retrying sheds): a 2xx, or a documented refusal with its code.
FINAL = {
    "density": (200, None), "validate": (200, None), "correct_imh": (200, None),
    "predict_wide": (200, None), "predict_levels": (200, None), "upload_npz": (201, None), "upload_csv": (201, None),
    "predict_overflow": (422, "output_nonfinite"),  # x = [[1e308]] overflows the network (docs/prediction.md)
    "metrics_since_1e30": (422, "request_invalid"),  # integer query parameters are bounded (docs/api.md)
    "density_over_cap": (413, "limit_exceeded"),  # grid² × rows × values over PARVIS_MAX_EVALUATION_VALUES
    "correct_over_cap": (413, "limit_exceeded"),  # proposals × data rows over 2²⁶
    "predict_over_cap": (413, "limit_exceeded"),  # draws × inputs over PARVIS_MAX_PREDICT_VALUES
    "upload_over_cap": (413, "dataset_too_large"),  # an .npz over PARVIS_MAX_DATASET_DECOMPRESSED_BYTES
}
WINDOW = {"density": 3, "validate": 3, "correct_imh": 3, "predict_wide": 2, "predict_levels": 2, "upload_npz": 3,
          "upload_csv": 2, "predict_overflow": 2, "metrics_since_1e30": 2, "density_over_cap": 1,
          "correct_over_cap": 1, "predict_over_cap": 1, "upload_over_cap": 1}
BNN_PARTICLES = 50
PREDICT_CAP = 2_000_000  # PARVIS_MAX_PREDICT_VALUES, the default; × 5 quantile levels for the mixture evaluations
CSV_ROWS = 1_500_000  # 2 values a row: 24 MB parsed, under UPLOAD_CAP
NPZ_ROWS = 1_900_000  # 2 values a row, zeros: 30 MB decompressed from ~100 KB, under UPLOAD_CAP


def npz_upload(rows: int, mark: int, cols: int = 1) -> bytes:
    x, y = np.zeros((rows, cols)), np.zeros(rows)
    x[0, 0] = mark  # a different data set each time
    buffer = io.BytesIO()
    np.savez_compressed(buffer, X=x, y=y)
    return buffer.getvalue()


def all_datasets(stack: Stack) -> dict[str, dict]:
    found, token = {}, None
    while True:
        page = stack.client.get("/v1/datasets", params={"page_size": 1000, **({"page_token": token} if token else {})})
        assert page.status_code == 200, page.text
        found.update({item["id"]: item for item in page.json()["datasets"]})
        token = page.json().get("next_page_token")
        if not token:
            return found


def test_every_hostile_kind_at_once_stays_within_the_budget(stack: Stack) -> None:
    """Issue 43: every hostile request kind at once, in one window, while the RSS of the API's whole process tree
    (the API process and its children, summed) is sampled every 20 ms: density grids and /targets/validate of a
    bnn over the 300,000-row upload, /sample corrections (`correct: "imh"`, 1,400 proposals against uci:protein's
    45,730 rows, just under the 2²⁶ proposals × rows cap), CSV and `.npz` uploads under the decompressed cap,
    /v1/jobs/{id}/predict at the caps (draws × inputs = PARVIS_MAX_PREDICT_VALUES with the default 5 levels,
    and draws × inputs × levels just under 5 × it with 99 levels), `x = [[1e308]]` (422 `output_nonfinite`),
    `since_step=1e30` (422 `request_invalid`), and one request of each kind over its cap (413).

    The bound, from docs/architecture.md ("The API under load") and service/settings.py: target evaluations hold
    at most PARVIS_REQUEST_MEMORY_BYTES each, and at most PARVIS_SAMPLE_CONCURRENCY of them run at once (the
    compute pool, where /predict runs too); uploads being decoded hold at most PARVIS_UPLOAD_DECODE_BUDGET_BYTES
    between them. So the tree's peak growth over its baseline (taken after a warm-up round of every kind, so
    imports, the target and predictor caches are paid) must stay under

        PARVIS_REQUEST_MEMORY_BYTES × PARVIS_SAMPLE_CONCURRENCY + PARVIS_UPLOAD_DECODE_BUDGET_BYTES + SLACK
        = BUDGET × POOL + 2 × UPLOAD_CAP + SLACK.

    No 5xx but the documented 503 `overloaded` (with Retry-After; retried until answered); every answer a 2xx or
    a problem+json with its kind's documented code (FINAL); nothing lost: every upload that got its 201 is
    listed by GET /v1/datasets with its rows, and the jobs, the sampler and the predictor still answer."""
    started = time.monotonic()
    dataset = upload(stack)
    rng = np.random.default_rng(5)
    x_train = rng.uniform(-2, 2, size=(60, 1))
    y_train = np.sin(2 * x_train[:, 0]) + 0.1 * rng.standard_normal(60)
    specs = {
        "bnn": {"method": "svgd", "num_particles": BNN_PARTICLES, "steps": 150, "seed": 1,
                "target": {"kind": "bnn", "dataset": {"X": x_train.tolist(), "y": y_train.tolist()}, "hidden": [8],
                           "standardize": True, "noise": {"type": "fixed", "std": 0.2}}},
        "sampler": {"method": "gpvi_exact", "num_particles": 32, "steps": 30,
                    "target": {"kind": "bayesian_linear_regression", "dataset": "uci:protein", "bias": True}},
        "grid": {"method": "svgd", "steps": 5, "num_particles": 4,
                 "target": {"kind": "bayesian_linear_regression", "dataset": dataset, "bias": True}},
    }
    worker = stack.start_worker()
    try:
        submitted = {name: stack.submit(spec) for name, spec in specs.items()}
        for answer in submitted.values():
            assert answer.status_code == 202, answer.text
        jobs = {name: stack.wait_status(answer.json()["id"], {"succeeded", "failed"}, timeout=300)
                for name, answer in submitted.items()}
    finally:
        stack.kill_worker(worker)  # not in the API's tree, but not competing for the two cores either
    for job in jobs.values():
        assert job["status"] == "succeeded", (job["error"], stack.log_tail())
    bnn_job, sampler_id = jobs["bnn"]["id"], jobs["sampler"]["sampler_id"]
    predict, sample = f"/v1/jobs/{bnn_job}/predict", f"/v1/samplers/{sampler_id}/sample"
    density = f"/v1/jobs/{jobs['grid']['id']}/density"
    bounds = {"x_min": -3, "x_max": 3, "y_min": -3, "y_max": 3}
    dim = 1 * 50 + 50 + 50 + 1 + 1  # the bnn's weights, biases and the noise's log γ
    validate = {"target": {"kind": "bnn", "dataset": dataset, "hidden": [50]},
                "points": np.zeros((6, dim)).tolist(), "dtype": "float64"}
    wide = PREDICT_CAP // BNN_PARTICLES  # every particle at this many inputs: the cap exactly
    levels = [round(0.01 * (k + 1), 2) for k in range(99)]
    narrow = 5 * PREDICT_CAP // (BNN_PARTICLES * len(levels))  # × 99 levels: just under 5 × the cap
    x_wide = rng.uniform(-2, 2, size=(wide, 1)).tolist()
    x_narrow = rng.uniform(-2, 2, size=(narrow, 1)).tolist()
    npz_body = [npz_upload(NPZ_ROWS, mark) for mark in range(1 + WINDOW["upload_npz"])]
    over_cap_npz = npz_upload(1_000_000, 0, cols=4)  # 5 values a row × 8 bytes: 40 MB, over the cap
    csv_body = [f"x,y\n{mark},0.25\n".encode() + b"0.5,1.5\n" * (CSV_ROWS - 1)
                for mark in range(1 + WINDOW["upload_csv"])]
    npz, csv = {"Content-Type": "application/x-npz"}, {"Content-Type": "text/csv"}

    def send(client: httpx.Client, kind: str, i: int) -> httpx.Response:
        match kind:
            case "density":
                return client.get(density, params={**bounds, "grid": 24})
            case "density_over_cap":
                return client.get(density, params={**bounds, "grid": 200})
            case "validate":
                return client.post("/v1/targets/validate", json=validate)
            case "correct_imh":
                return client.post(sample, json={"n": 200, "seed": i, "correct": "imh", "proposals": 1400})
            case "correct_over_cap":
                return client.post(sample, json={"n": 200, "seed": i, "correct": "imh", "proposals": 1500})
            case "predict_wide":
                return client.post(predict, json={"x": x_wide})
            case "predict_levels":
                return client.post(predict, json={"x": x_narrow, "quantiles": levels})
            case "predict_over_cap":
                return client.post(predict, json={"x": [*x_wide, [0.0]]})
            case "predict_overflow":
                return client.post(predict, json={"x": [[1e308]]})
            case "metrics_since_1e30":
                return client.get(f"/v1/jobs/{bnn_job}/metrics", params={"since_step": "1e30"})
            case "upload_npz":
                return client.post("/v1/datasets", content=npz_body[i], headers=npz)
            case "upload_csv":
                return client.post("/v1/datasets", content=csv_body[i], headers=csv)
            case "upload_over_cap":
                return client.post("/v1/datasets", content=over_cap_npz, headers=npz)
        raise AssertionError(kind)

    finished: dict[tuple[str, int], float] = {}

    def answered(task: tuple[str, int]) -> tuple[str, list[tuple[int, str, str | None, str | None]], httpx.Response]:
        """The task's final answer after retrying documented sheds, and every answer it got on the way."""
        kind, i = task
        seen = []
        deadline = time.monotonic() + 180
        with httpx.Client(base_url=stack.base_url, timeout=300) as client:
            while True:
                answer = send(client, kind, i)
                problem = answer.headers.get("content-type") == "application/problem+json"
                seen.append((answer.status_code, answer.headers.get("content-type", ""),
                             answer.json().get("code") if problem else None, answer.headers.get("retry-after")))
                if (answer.status_code, seen[-1][2]) != SHED or time.monotonic() > deadline:
                    finished[task] = time.monotonic()
                    return kind, seen, answer
                time.sleep(float(answer.headers["retry-after"]) * 0.2)

    def check(kind: str, answer: httpx.Response) -> None:
        status, code = FINAL[kind]
        if code is not None:
            assert_problem(answer, status, code)
            return
        assert answer.status_code == status, (kind, answer.text[:500])
        body = answer.json()
        if kind == "density":
            assert len(body["log_prob"]) == 24 and all(v is not None for row in body["log_prob"] for v in row)
        elif kind == "validate":
            assert all(v is not None for v in body["log_prob"])
        elif kind == "correct_imh":
            assert body["shape"] == [200, 10] and body["correction"]["method"] == "imh"  # protein: 9 + bias
            assert 0 <= body["correction"]["acceptance_rate"] <= 1
        elif kind.startswith("predict"):
            m = len(x_wide) if kind == "predict_wide" else len(x_narrow)
            assert body["n_draws"] == BNN_PARTICLES and len(body["mean"]) == m and all(np.isfinite(body["mean"]))
            assert np.asarray(body["quantiles"]).shape == (5 if kind == "predict_wide" else len(levels), m)

    # Warm-up: one of each kind, alone (imports, the target and predictor caches, first allocations are paid).
    warm = {}
    for kind in FINAL:
        _, _, warm[kind] = answered((kind, WINDOW[kind]))  # uploads: a body of its own
        check(kind, warm[kind])
    uploaded = {warm[kind].json()["id"]: rows for kind, rows in (("upload_npz", NPZ_ROWS), ("upload_csv", CSV_ROWS))}

    tasks = [(kind, i) for i in range(max(WINDOW.values())) for kind, count in WINDOW.items() if i < count]
    time.sleep(0.5)
    baseline = tree_rss(stack.api.pid)
    window_started = time.monotonic()
    with PeakRss(stack.api.pid) as rss, ThreadPoolExecutor(len(tasks)) as pool:
        results = list(pool.map(answered, tasks))
    window = time.monotonic() - window_started
    growth = rss.peak - baseline

    seen = [(kind, *answer) for kind, answers, _ in results for answer in answers]
    server_errors = [entry for entry in seen if entry[1] >= 500 and (entry[1], entry[3]) != SHED]
    assert not server_errors, server_errors
    for kind, status, content_type, code, retry_after in seen:
        if status >= 300:
            assert content_type == "application/problem+json", (kind, status, content_type)
            assert (status, code) in (FINAL[kind], SHED), (kind, status, code)
        if (status, code) == SHED:
            assert retry_after is not None, kind
    for kind, _, answer in results:
        check(kind, answer)
        if kind in ("density", "predict_wide", "predict_levels"):  # the same answer under load as alone
            field = "log_prob" if kind == "density" else "quantiles"
            np.testing.assert_allclose(np.asarray(answer.json()[field], dtype=float),
                                       np.asarray(warm[kind].json()[field], dtype=float), rtol=1e-12)
        if kind in ("upload_npz", "upload_csv"):
            uploaded[answer.json()["id"]] = NPZ_ROWS if kind == "upload_npz" else CSV_ROWS
    shed = {kind: sum((status, code) == SHED for k, status, _, code, _ in seen if k == kind) for kind in WINDOW}
    last = {kind: max(at - window_started for (k, _), at in finished.items() if k == kind) for kind in WINDOW}
    print(f"{len(tasks)} hostile requests at once in {window:.1f} s (last answers at "
          f"{ {k: round(v, 1) for k, v in last.items()} } s; {len(seen) - len(tasks)} shed and retried: "
          f"{ {k: v for k, v in shed.items() if v} }); API tree RSS baseline {baseline / 2**20:.0f} MiB, "
          f"peak growth {growth / 2**20:.0f} MiB of {(BUDGET * POOL + 2 * UPLOAD_CAP + SLACK) / 2**20:.0f} MiB")
    assert growth < BUDGET * POOL + 2 * UPLOAD_CAP + SLACK, f"the API's tree grew by {growth / 2**20:.0f} MiB"

    # Nothing lost: every stored upload is listed with its rows; the jobs, sampler and predictor still answer.
    listed = all_datasets(stack)
    for dataset_id, rows in uploaded.items():
        assert dataset_id in listed and listed[dataset_id]["n_rows"] == rows, dataset_id
    assert stack.api.poll() is None
    for job in jobs.values():
        assert stack.job(job["id"])["status"] == "succeeded"
    assert stack.client.get(f"/v1/samplers/{sampler_id}").status_code == 200
    again = stack.client.post(sample, json={"n": 10, "seed": 1})
    assert again.status_code == 200 and again.json()["shape"][0] == 10, again.text
    again = stack.client.post(predict, json={"x": [[0.0], [1.0]]})
    assert again.status_code == 200 and len(again.json()["mean"]) == 2, again.text
    print(f"whole test: {time.monotonic() - started:.0f} s")
