"""`parvis.Client` / `parvis.AsyncClient` against a real `parvis serve` (embedded mode, real HTTP): progress
output, SSE waiting and its polling fallback, typed errors with problem codes, Idempotency-Key retries,
sampler draws, offline sampling, prediction and ArviZ export. Every array the client returns is checked
against the API's own JSON answers fetched with plain httpx (an independent decoding path)."""

from __future__ import annotations

import asyncio
import contextlib
import io
import threading
import time
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pytest

import parvis
from parvis.export import named_variables
from tests.support.stack import free_port, wait_for

pytestmark = pytest.mark.integration

GAUSSIAN = {"kind": "gaussian", "mean": [1.0, -2.0], "cov": [[1.0, 0.8], [0.8, 2.0]]}
SVGD = {"method": "svgd", "num_particles": 100, "steps": 300, "target": GAUSSIAN}
GPVI = {"method": "gpvi", "num_particles": 100, "steps": 300, "options": {"helper": "matrix"}, "target": GAUSSIAN}
LONG = {"method": "svgd", "num_particles": 1000, "steps": 1_000_000, "target": GAUSSIAN}  # runs until cancelled


class RecordingTransport(httpx.HTTPTransport):
    """A real HTTP transport that notes (method, path, status) of every exchange; optionally it loses the
    first answer to a submit *after* the server has handled it, as a dropped connection would."""

    def __init__(self, lose_first_submit_answer: bool = False):
        super().__init__()
        self.exchanges: list[tuple[str, str, int]] = []
        self.submit_keys: list[str | None] = []
        self.lose_first = lose_first_submit_answer

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        response = super().handle_request(request)
        self.exchanges.append((request.method, request.url.path, response.status_code))
        if request.method == "POST" and request.url.path == "/v1/jobs":
            self.submit_keys.append(request.headers.get("Idempotency-Key"))
            if self.lose_first:
                self.lose_first = False
                response.read()
                response.close()
                raise httpx.ReadError("connection lost after the server answered")
        return response


class RecordingAsyncTransport(httpx.AsyncHTTPTransport):
    """The async twin of RecordingTransport's notes: (method, path, status) of every exchange."""

    def __init__(self) -> None:
        super().__init__()
        self.exchanges: list[tuple[str, str, int]] = []

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        response = await super().handle_async_request(request)
        self.exchanges.append((request.method, request.url.path, response.status_code))
        return response


@pytest.fixture(scope="module")
def raw(served: Any) -> Any:
    with httpx.Client(base_url=served.url, timeout=60) as http:
        yield http


@pytest.fixture(scope="module")
def client(served: Any) -> Any:
    with parvis.Client(served.url) as c:
        yield c


@pytest.fixture(scope="module")
def gpvi_job(client: Any) -> dict[str, Any]:
    return client.wait(client.submit(GPVI), progress=False)


def test_submit_wait_with_progress_particles_and_metrics(client: Any, raw: httpx.Client) -> None:
    transport = RecordingTransport()
    with parvis.Client(client.url, transport=transport) as recorded:
        job = recorded.submit({**SVGD, "name": "progress"})
        assert job["status"] == "queued" and job["id"].startswith("job_")
        out = io.StringIO()
        done = recorded.wait(job, progress=True, file=out)
    assert done["status"] == "succeeded" and done["progress"]["step"] == 300
    shown = out.getvalue()
    assert job["id"] in shown and "300/300 steps" in shown and "succeeded" in shown
    assert "%|" in shown  # a tqdm bar, redrawn as progress arrived
    # The wait followed the job's event stream (SSE) instead of polling the job.
    assert ("GET", f"/v1/jobs/{job['id']}/events", 200) in transport.exchanges
    assert ("GET", f"/v1/jobs/{job['id']}", 200) not in transport.exchanges

    particles = client.particles(job)
    as_json = raw.get(f"/v1/jobs/{job['id']}/particles").json()
    assert particles.dtype == np.float32 and particles.shape == (100, 2) == tuple(as_json["shape"])
    np.testing.assert_array_equal(particles, np.asarray(as_json["particles"], dtype=np.float32))
    np.testing.assert_allclose(particles.mean(0), GAUSSIAN["mean"], atol=0.3)  # closed-form mean

    columns = client.metrics(job)
    points = raw.get(f"/v1/jobs/{job['id']}/metrics").json()["points"]
    assert columns["step"].tolist() == [p["step"] for p in points]
    name = next(iter(points[-1]["values"]))
    assert columns[name][-1] == pytest.approx(points[-1]["values"][name])
    assert len(client.metrics(job, max_points=3)["step"]) == min(3, len(points))


def test_typed_errors_carry_the_problem_code(client: Any, served: Any) -> None:
    with pytest.raises(parvis.NotFoundError) as missing:
        client.job("job_does_not_exist")
    assert missing.value.code == "not_found" and missing.value.status == 404 and missing.value.request_id
    with pytest.raises(parvis.ValidationError) as invalid:
        client.submit({**SVGD, "target": {"kind": "gaussian", "mean": [0, 0], "cov": [[1, 2], [2, 1]]}})
    assert invalid.value.code == "target_invalid" and "positive definite" in str(invalid.value)
    failing = client.submit({"method": "svgd", "num_particles": 10, "steps": 50,
                             "target": {"kind": "expression", "dim": 1, "log_prob": "log(-1 - x[0]**2)"}})
    with pytest.raises(parvis.JobFailedError) as failed:
        client.wait(failing, progress=False)
    assert failed.value.code == "target_nonfinite" and failed.value.job["status"] == "failed"
    assert client.wait(failing, progress=False, raise_on_failure=False)["error"]["code"] == "target_nonfinite"
    with pytest.raises(parvis.ParvisError) as no_sampler:
        client.sampler(failing).sample(3)
    assert no_sampler.value.code == "job_not_finished"
    with parvis.Client(f"http://127.0.0.1:{free_port()}", retries=1) as nowhere, \
            pytest.raises(parvis.ConnectionFailedError) as refused:
        nowhere.methods()
    assert refused.value.code == "connection_failed"


def test_submit_retried_after_a_lost_answer_makes_one_job(client: Any) -> None:
    transport = RecordingTransport(lose_first_submit_answer=True)
    name = f"retried-{time.time_ns()}"
    with parvis.Client(client.url, transport=transport) as lossy:
        job = lossy.submit({**SVGD, "steps": 20, "name": name})
    assert len(transport.submit_keys) == 2 and transport.submit_keys[0] == transport.submit_keys[1]
    assert transport.exchanges[-1] == ("POST", "/v1/jobs", 200)  # the server's idempotent replay
    assert [j["id"] for j in client.jobs(limit=100) if j["name"] == name] == [job["id"]]

    first = client.submit({**SVGD, "steps": 20}, idempotency_key=f"key-{name}")
    assert client.submit({**SVGD, "steps": 20}, idempotency_key=f"key-{name}")["id"] == first["id"]
    with pytest.raises(parvis.ValidationError) as reused:
        client.submit({**SVGD, "steps": 21}, idempotency_key=f"key-{name}")
    assert reused.value.code == "idempotency_key_reused"
    client.wait(first, progress=False)
    client.wait(job, progress=False)


def test_wait_falls_back_to_polling_when_streams_are_full_then_cancel(client: Any, served: Any) -> None:
    long_job = client.submit(LONG)
    short_job = client.submit({**SVGD, "steps": 50})
    wait_for(lambda: client.job(long_job)["status"] == "running", 60, what="the long job to run")
    with pytest.raises(parvis.ConflictError) as not_yet:
        client.particles(long_job)
    assert not_yet.value.code == "job_not_finished"
    opened = threading.Semaphore(0)

    def follow() -> None:  # one event stream held open until the long job ends
        with httpx.stream("GET", f"{served.url}/v1/jobs/{long_job['id']}/events", timeout=120) as stream:
            assert stream.status_code == 200
            for line in stream.iter_lines():
                if line.startswith("id:"):
                    opened.release()

    followers = [threading.Thread(target=follow, daemon=True) for _ in range(2)]  # the `served` cap
    for follower in followers:
        follower.start()
    try:
        assert opened.acquire(timeout=60) and opened.acquire(timeout=60)
        with pytest.raises(parvis.WaitTimeoutError) as timed_out:
            client.wait(long_job, progress=False, timeout=1.0, poll_interval=0.2)
        assert timed_out.value.code == "wait_timeout"

        async def async_wait() -> RecordingAsyncTransport:  # the async client's fallback and timeout
            recording = RecordingAsyncTransport()
            async with parvis.AsyncClient(client.url, transport=recording) as aclient:
                with pytest.raises(parvis.WaitTimeoutError) as async_timed_out:
                    await aclient.wait(long_job, progress=False, timeout=1.5, poll_interval=0.2)
            assert async_timed_out.value.code == "wait_timeout"
            return recording

        seen = asyncio.run(async_wait()).exchanges
        assert ("GET", f"/v1/jobs/{long_job['id']}/events", 429) in seen  # refused: the cap is full
        assert ("GET", f"/v1/jobs/{long_job['id']}", 200) in seen  # so it polled until its timeout

        transport = RecordingTransport()
        outcome: dict[str, Any] = {}
        with parvis.Client(client.url, transport=transport) as recorded:
            waiter = threading.Thread(target=lambda: outcome.update(
                job=recorded.wait(short_job, progress=True, file=io.StringIO(), poll_interval=0.2)))
            waiter.start()
            wait_for(lambda: ("GET", f"/v1/jobs/{short_job['id']}/events", 429) in transport.exchanges, 30,
                     what="the stream to be refused")
            cancelled = client.cancel(long_job)
            assert cancelled["cancel_requested"] or cancelled["status"] == "cancelled"
            waiter.join(120)
    finally:
        with contextlib.suppress(parvis.ConflictError):  # already cancelled: 409 job_finished
            client.cancel(long_job)
        for follower in followers:
            follower.join(60)
    assert outcome["job"]["status"] == "succeeded"
    assert ("GET", f"/v1/jobs/{short_job['id']}", 200) in transport.exchanges  # polled instead
    with pytest.raises(parvis.JobCancelledError) as was_cancelled:
        client.wait(long_job, progress=False)
    assert was_cancelled.value.code == "cancelled"


def test_sampler_draws_download_and_offline_sampling(client: Any, raw: httpx.Client, gpvi_job: dict[str, Any],
                                                     tmp_path: Path) -> None:
    sampler = client.sampler(gpvi_job)
    draws = sampler.sample(500, seed=7)
    as_json = raw.post(f"/v1/samplers/{gpvi_job['sampler_id']}/sample", json={"n": 500, "seed": 7}).json()
    np.testing.assert_array_equal(draws, np.asarray(as_json["samples"], dtype=np.float32))
    np.testing.assert_array_equal(client.sampler(gpvi_job["sampler_id"]).sample(500, seed=7), draws)
    assert sampler.info()["id"] == gpvi_job["sampler_id"]
    zip_path = client.download(gpvi_job, tmp_path / "sampler.zip")
    np.testing.assert_array_equal(parvis.load_sampler(zip_path).sample(500, seed=7), draws)
    onnx_path = sampler.download(tmp_path / "sampler.onnx", format="onnx")
    assert onnx_path.read_bytes() == raw.get(f"/v1/samplers/{gpvi_job['sampler_id']}/download",
                                             params={"format": "onnx"}).content
    with pytest.raises(parvis.ValidationError) as bad_format:
        client.download(gpvi_job, tmp_path / "x", format="pickle")
    assert bad_format.value.code == "format_invalid" and not (tmp_path / "x").exists()


def test_async_client(served: Any, raw: httpx.Client, gpvi_job: dict[str, Any], tmp_path: Path) -> None:
    async def scenario() -> tuple[dict[str, Any], np.ndarray, np.ndarray, str]:
        async with parvis.AsyncClient(served.url) as aclient:
            out = io.StringIO()
            job = await aclient.wait(await aclient.submit({**SVGD, "steps": 100}), file=out)
            particles = await aclient.particles(job)
            draws = await aclient.sampler(gpvi_job["sampler_id"]).sample(50, seed=3)
            await aclient.download(gpvi_job, tmp_path / "async.zip")
            try:
                await aclient.job("job_missing")
            except parvis.NotFoundError as exc:
                code = exc.code
            return job, particles, draws, out.getvalue() + code

    job, particles, draws, shown = asyncio.run(scenario())
    assert (tmp_path / "async.zip").read_bytes() == raw.get(f"/v1/samplers/{gpvi_job['sampler_id']}/download").content
    assert job["status"] == "succeeded" and "100/100 steps" in shown and shown.endswith("not_found")
    np.testing.assert_array_equal(particles, np.asarray(raw.get(f"/v1/jobs/{job['id']}/particles").json()["particles"],
                                                        dtype=np.float32))
    np.testing.assert_array_equal(draws, np.asarray(raw.post(f"/v1/samplers/{gpvi_job['sampler_id']}/sample",
                                                             json={"n": 50, "seed": 3}).json()["samples"],
                                                    dtype=np.float32))


def _bnn_target() -> dict[str, Any]:
    rng = np.random.default_rng(0)
    x = rng.normal(size=(40, 3))
    y = x @ np.array([1.0, -1.0, 0.5]) + 0.1 * rng.normal(size=40)
    return {"kind": "bnn", "dataset": {"X": x.tolist(), "y": y.tolist()}, "hidden": [4]}


def test_bnn_predict_and_inference_data_named_by_the_layout(client: Any, raw: httpx.Client) -> None:
    pytest.importorskip("arviz")
    from inference_core.schemas.models import mlp_layout

    job = client.wait(client.submit({"method": "svgd", "num_particles": 12, "steps": 60, "target": _bnn_target()}),
                      progress=False)
    x = [[0.1, 0.2, 0.3], [-1.0, 0.0, 2.0]]
    predicted = client.predict(job, x, quantiles=[0.1, 0.9])
    expected = raw.post(f"/v1/jobs/{job['id']}/predict", json={"x": x, "seed": 0, "quantiles": [0.1, 0.9]}).json()
    np.testing.assert_allclose(predicted["mean"], expected["mean"])
    assert isinstance(predicted["mean"], np.ndarray) and predicted["mean"].shape == (2,)

    particles = client.particles(job)
    idata = client.inference_data(job)
    # The layout written independently: 3 inputs, 4 hidden units, 1 output, then the noise precision.
    layout = mlp_layout(3, [4], 1, ["log_noise_precision"])
    assert list(idata.posterior.data_vars) == [block.name for block in layout]
    for block in layout:
        values = idata.posterior[block.name].values[0]
        np.testing.assert_array_equal(values, particles[:, block.offset:block.offset + block.size]
                                      .reshape(len(particles), *block.shape))
    assert idata.posterior["layer0.weight"].dims == ("chain", "draw", "layer0_out", "layer0_in")
    assert idata.posterior["layer0.bias"].dims == ("chain", "draw", "layer0_out")
    assert idata.posterior.sizes["draw"] == 12

    sampler_job = client.wait(client.submit({"method": "gpvi", "num_particles": 20, "steps": 40,
                                             "target": _bnn_target()}), progress=False)
    on_sampler = client.sampler(sampler_job).predict(x, n=50, seed=2)
    expected = raw.post(f"/v1/samplers/{sampler_job['sampler_id']}/predict", json={"x": x, "n": 50, "seed": 2}).json()
    np.testing.assert_allclose(on_sampler["std"], expected["std"])
    from_sampler = client.inference_data(sampler_job["sampler_id"], n=30, seed=5)
    draws = client.sampler(sampler_job).sample(30, seed=5)
    np.testing.assert_array_equal(from_sampler.posterior["layer1.weight"].values[0], draws[:, 16:20].reshape(30, 1, 4))


def test_inference_data_of_an_expression_target_and_csv_npy(client: Any, tmp_path: Path) -> None:
    arviz = pytest.importorskip("arviz")
    spec = {"method": "svgd", "num_particles": 40, "steps": 100,
            "target": {"kind": "expression", "dim": 2, "log_prob": "log_normal(x[0], 0, 1) + log_normal(x[1], 3, 2)"}}
    job = client.wait(client.submit(spec), progress=False)
    particles = client.particles(job)
    idata = client.inference_data(job)
    assert idata.posterior["x"].dims == ("chain", "draw", "x_dim")
    summary = arviz.summary(idata, kind="stats", round_to="none")
    assert list(summary.index) == ["x[0]", "x[1]"]  # the expression language's own names
    np.testing.assert_allclose(summary["mean"].to_numpy(), particles.mean(0), rtol=1e-6)
    named = client.inference_data(job, names=["mu", "tau"])
    np.testing.assert_array_equal(named.posterior["tau"].values[0], particles[:, 1])
    with pytest.raises(parvis.ParvisError) as wrong:
        named_variables(particles, names=["only_one"])
    assert wrong.value.code == "names_invalid"

    parvis.save_draws(particles, tmp_path / "p.npy")
    parvis.save_draws(particles, tmp_path / "p.csv")
    np.testing.assert_array_equal(np.load(tmp_path / "p.npy", allow_pickle=False), particles)
    assert (tmp_path / "p.csv").read_text().splitlines()[0] == "x[0],x[1]"
    np.testing.assert_array_equal(np.loadtxt(tmp_path / "p.csv", delimiter=",", skiprows=1, dtype=np.float32),
                                  particles)
