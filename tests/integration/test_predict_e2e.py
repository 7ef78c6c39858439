"""/predict over real HTTP on the cluster stack (uvicorn API, Celery worker, Redis, PostgreSQL): a function-space
particle job and a hypernetwork sampler, many clients at once, and the same answers after the API restarts cold
(its in-process predictor cache gone)."""

from __future__ import annotations

import signal
from concurrent.futures import ThreadPoolExecutor

import httpx
import numpy as np
import pytest

from tests.support.stack import started_embedded

pytestmark = pytest.mark.integration

RNG = np.random.default_rng(3)
X_TRAIN = RNG.uniform(-2, 2, size=(60, 2))
Y_TRAIN = np.sin(X_TRAIN[:, 0]) + 0.5 * X_TRAIN[:, 1] + 0.1 * RNG.standard_normal(60)
TARGET = {"kind": "bnn", "dataset": {"X": X_TRAIN.tolist(), "y": Y_TRAIN.tolist()}, "hidden": [8],
          "standardize": True, "noise": {"type": "fixed", "std": 0.2}}
X_NEW = RNG.uniform(-2, 2, size=(25, 2)).tolist()
CLIENTS = 12


@pytest.fixture(scope="module")
def trained(tmp_path_factory: pytest.TempPathFactory):
    specs = {"particles": {"method": "fsvgd", "target": TARGET, "num_particles": 10, "steps": 150, "seed": 1,
                           "options": {"extra_points": 10}},
             "sampler": {"method": "amortized_svgd", "target": TARGET, "num_particles": 16, "steps": 60,
                         "seed": 2}}
    with started_embedded(tmp_path_factory.mktemp("predict"), mode="cluster") as stack:
        ids = {name: stack.submit(spec).json()["id"] for name, spec in specs.items()}
        jobs = {name: stack.wait_status(job_id, {"succeeded", "failed"}, timeout=300)
                for name, job_id in ids.items()}
        for job in jobs.values():
            assert job["status"] == "succeeded", (job["error"], stack.log_tail())
        yield stack, jobs


def urls(jobs: dict) -> list[str]:
    return [f"/v1/jobs/{jobs['particles']['id']}/predict", f"/v1/samplers/{jobs['sampler']['sampler_id']}/predict"]


def predict_all(base_url: str, jobs: dict) -> list[dict]:
    """Every route asked CLIENTS times at once, each from its own connection; returns one answer per route
    after checking all its answers agree."""
    body = {"x": X_NEW, "n": 10, "seed": 4}

    def call(url: str) -> dict:
        with httpx.Client(base_url=base_url, timeout=60) as client:
            response = client.post(url, json=body)
        assert response.status_code == 200, response.text
        return response.json()

    answers = []
    for url in urls(jobs):
        with ThreadPoolExecutor(CLIENTS) as pool:
            results = list(pool.map(call, [url] * CLIENTS))
        for other in results[1:]:
            assert other == results[0]
        answers.append(results[0])
    return answers


def test_predict_holds_many_clients_and_a_cold_restart(trained) -> None:
    stack, jobs = trained
    before = predict_all(stack.base_url, jobs)
    for answer in before:
        assert answer["task"] == "regression" and answer["n_draws"] == 10
        mean, std, epistemic = (np.asarray(answer[key]) for key in ("mean", "std", "std_epistemic"))
        assert mean.shape == std.shape == (len(X_NEW),)
        # The predictive std includes the fixed observation noise 0.2 (in y's units: 0.2 · std(y)).
        noise = 0.2 * Y_TRAIN.std()
        np.testing.assert_allclose(std, np.sqrt(epistemic**2 + noise**2), rtol=1e-6)
    # Restart the API process: the predictors are rebuilt from the stored artifacts, with the same answers.
    stack.api.send_signal(signal.SIGTERM)
    stack.api.wait(timeout=30)
    stack.start_api()
    assert predict_all(stack.base_url, jobs) == before


def test_predict_errors_over_http(trained) -> None:
    stack, jobs = trained
    job_url, sampler_url = urls(jobs)
    wrong_width = stack.client.post(job_url, json={"x": [[1.0, 2.0, 3.0]]})
    assert wrong_width.status_code == 422 and wrong_width.json()["code"] == "input_invalid"
    non_finite = stack.client.post(sampler_url, content=b'{"x": [[1.0, NaN]]}',
                                   headers={"content-type": "application/json"})
    assert non_finite.status_code == 422
    assert stack.client.post("/v1/jobs/job_missing/predict", json={"x": X_NEW}).status_code == 404


def test_hypernetwork_sampler_carries_a_certificate(trained) -> None:
    """Issue 16 on the cluster stack (quality stored as JSONB in PostgreSQL): the worker certified the BNN
    hypernetwork against its data, and /sample's log weights over inline data match the target rebuilt here."""
    import torch

    from inference_core.samplers.certificate import KSD_DRAWS, KSD_ONLY_DRAWS, VERDICTS
    from inference_core.targets import BuildContext, build_target

    stack, jobs = trained
    url = f"/v1/samplers/{jobs['sampler']['sampler_id']}"
    quality = stack.client.get(url).json()["quality"]
    assert quality["density"] in ("exact", "branch") and quality["importance"]["pareto_k"] is not None
    # a folded generator's branch density gives no valid weights: the KSD test alone decides, with more draws
    assert quality["ksd"]["n"] == (KSD_ONLY_DRAWS if quality["density"] == "branch" else KSD_DRAWS)
    assert quality["verdict"] in VERDICTS
    body = stack.client.post(url + "/sample", json={"n": 20, "seed": 1, "return": ["log_q", "log_weights"]}).json()
    draws = torch.tensor(body["samples"], dtype=torch.float64)
    log_p = build_target(TARGET, BuildContext(dtype=torch.float64)).log_prob(draws).numpy()
    np.testing.assert_allclose(np.asarray(body["log_weights"]) + np.asarray(body["log_q"]), log_p, rtol=1e-9)
