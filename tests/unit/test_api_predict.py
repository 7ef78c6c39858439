"""The predict routes in-process: the real app (SQLite, filesystem broker) and the real worker code
(`workers.runner.JobExecution`) run in this process on jobs submitted through the API. Shapes and values
against a direct float64 computation from the job's own particles, held-out metrics, errors (404 / 409 /
413 / 422 with stable codes), tenant isolation and the OpenAPI document."""

from __future__ import annotations

import numpy as np
import pytest

from inference_core.samplers import load
from service.api_keys import create_api_key
from service.db import make_engine, make_session_factory
from service.settings import Settings
from tests.support.inprocess import run_worker
from tests.support.threads import single_torch_thread  # noqa: F401  (autouse fixture)
from tests.unit.test_api_jobs import assert_problem


def train(client, settings: Settings, headers: dict, spec: dict) -> dict:
    response = client.post("/v1/jobs", json=spec, headers=headers)
    assert response.status_code == 202, response.text
    run_worker(settings, response.json()["id"])
    job = client.get(f"/v1/jobs/{response.json()['id']}", headers=headers).json()
    assert job["status"] == "succeeded", job["error"]
    return job


def relu_forward(weights: np.ndarray, X: np.ndarray, sizes: list[int]) -> np.ndarray:
    """Outputs [n, m, out] one draw at a time from the flat layout (W [out, in] row-major, then b)."""
    outputs = []
    for theta in weights:
        h, offset = X, 0
        for layer, (fan_in, fan_out) in enumerate(zip(sizes[:-1], sizes[1:], strict=True)):
            W = theta[offset: offset + fan_out * fan_in].reshape(fan_out, fan_in)
            b = theta[offset + fan_out * fan_in: offset + fan_out * fan_in + fan_out]
            offset += fan_out * fan_in + fan_out
            h = h @ W.T + b
            h = np.maximum(h, 0.0) if layer < len(sizes) - 2 else h
        outputs.append(h)
    return np.stack(outputs)


@pytest.fixture
def service(make_client):
    client, settings = make_client(auth_enabled=True, max_predict_values=5000)
    sessions = make_session_factory(make_engine(settings.database_url))
    with sessions() as session:
        a = {"Authorization": f"Bearer {create_api_key(session, 'a')}"}
        b = {"Authorization": f"Bearer {create_api_key(session, 'b')}"}
    return client, settings, a, b


def test_job_predict_regression_values_errors_and_tenancy(service) -> None:
    client, settings, a, b = service
    rng = np.random.default_rng(0)
    X, X_test = rng.uniform(-2, 2, size=(60, 2)) * [1.0, 10.0], rng.uniform(-2, 2, size=(40, 2)) * [1.0, 10.0]
    y, y_test = (5 + np.sin(X[:, 0]) + 0.1 * X[:, 1] + 0.3 * rng.normal(size=60),
                 5 + np.sin(X_test[:, 0]) + 0.1 * X_test[:, 1] + 0.3 * rng.normal(size=40))
    upload = client.post("/v1/datasets", json={"X": X.tolist(), "y": y.tolist(), "X_test": X_test.tolist(),
                                               "y_test": y_test.tolist()}, headers=a)
    assert upload.status_code == 201, upload.text
    spec = {"method": "svgd", "num_particles": 12, "steps": 60, "seed": 1,
            "target": {"kind": "bnn", "dataset": upload.json()["id"], "hidden": [6], "standardize": True},
            "options": {"optimizer": {"name": "adam", "lr": 0.02}}}
    job = train(client, settings, a, spec)
    assert {"test_rmse", "test_ll"} <= set(job["metrics"])  # the upload has a test part
    url = f"/v1/jobs/{job['id']}/predict"

    x = rng.normal(size=(7, 2)) * [1.0, 10.0]
    response = client.post(url, json={"x": x.tolist(), "quantiles": [0.1, 0.9]}, headers=a)
    assert response.status_code == 200, response.text
    out = response.json()
    assert out["task"] == "regression" and out["n_draws"] == 12
    assert [len(out[k]) for k in ("mean", "std", "std_epistemic")] == [7, 7, 7]
    assert out["quantile_levels"] == [0.1, 0.9] and np.shape(out["quantiles"]) == (2, 7)
    # Direct float64 computation from the job's particles and the training data's statistics.
    particles = np.array(client.get(f"/v1/jobs/{job['id']}/particles", headers=a).json()["particles"])
    f = y.mean() + y.std() * relu_forward(particles, (x - X.mean(0)) / X.std(0), [2, 6, 1])[..., 0]
    sigma = y.std() * np.exp(-0.5 * particles[:, -1])  # the default Gamma prior on the noise precision
    np.testing.assert_allclose(out["mean"], f.mean(0), rtol=1e-6)
    np.testing.assert_allclose(out["std_epistemic"], f.std(0), rtol=1e-5)
    np.testing.assert_allclose(out["std"], np.sqrt(f.var(0) + (sigma**2).mean()), rtol=1e-6)
    assert np.all(np.array(out["quantiles"][0]) < out["mean"]) and np.all(np.array(out["quantiles"][1]) > out["mean"])
    # The run's held-out RMSE is that of this predictive mean on the test part.
    test_mean = client.post(url, json={"x": X_test.tolist()}, headers=a).json()["mean"]
    assert job["metrics"]["test_rmse"] == pytest.approx(np.sqrt(np.mean((np.array(test_mean) - y_test) ** 2)),
                                                        rel=1e-5)
    assert client.post(url, json={"x": x.tolist(), "n": 3}, headers=a).json()["n_draws"] == 3

    # Errors: other tenant / unknown id 404; bad inputs 422 input_invalid; over the cap 413.
    assert_problem(client.post(url, json={"x": x.tolist()}, headers=b), 404, "not_found")
    assert_problem(client.post("/v1/jobs/job_nope/predict", json={"x": x.tolist()}, headers=a), 404, "not_found")
    for body in [{"x": [[1.0, 2.0, 3.0]]}, {"x": [[1.0], [1.0, 2.0]]}, {"x": []}, {"x": [["a", 1.0]]},
                 {"x": [[1.0, 2.0]], "n": 0}, {"x": [[1.0, 2.0]], "n": 13}, {"x": [[1.0, 2.0]], "quantiles": [1.0]},
                 {"x": [[1.0, 2.0]], "extra": 1}, [1, 2]]:
        assert_problem(client.post(url, json=body, headers=a), 422, "input_invalid")
    nan = client.post(url, content=b'{"x": [[NaN, 1.0]]}', headers={**a, "Content-Type": "application/json"})
    assert_problem(nan, 422, "input_invalid")
    assert_problem(client.post(url, json={"x": np.zeros((500, 2)).tolist()}, headers=a), 413, "limit_exceeded")
    # quantile levels count: 100 inputs × the particles × 99 levels is over 5000 × the default's 5 levels
    levels = np.linspace(0.01, 0.99, 99).tolist()
    many = {"x": np.zeros((100, 2)).tolist(), "quantiles": levels}
    assert_problem(client.post(url, json=many, headers=a), 413, "limit_exceeded")
    assert client.post(url, json={**many, "quantiles": levels[:5]}, headers=a).status_code == 200

    # A job that has not finished: 409; a job on a target with no predictive model: 422 predict_unsupported.
    queued = client.post("/v1/jobs", json={**spec, "seed": 2}, headers=a).json()
    assert_problem(client.post(f"/v1/jobs/{queued['id']}/predict", json={"x": x.tolist()}, headers=a),
                   409, "job_not_finished")
    gaussian = train(client, settings, a, {"method": "svgd", "num_particles": 4, "steps": 2,
                                           "target": {"kind": "gaussian", "mean": [0.0, 0.0],
                                                      "cov": [[1.0, 0.0], [0.0, 1.0]]}})
    assert_problem(client.post(f"/v1/jobs/{gaussian['id']}/predict", json={"x": x.tolist()}, headers=a),
                   422, "predict_unsupported")


def test_sampler_predict_classification_seeded_and_scoped(service) -> None:
    client, settings, a, b = service
    rng = np.random.default_rng(1)
    X = rng.normal(size=(40, 2))
    y = (X[:, 0] > 0).astype(int) + (X[:, 1] > 0.5).astype(int)
    spec = {"method": "amortized_svgd", "num_particles": 8, "steps": 5,
            "target": {"kind": "bnn", "task": "classification", "hidden": [5],
                       "dataset": {"X": X.tolist(), "y": y.tolist()}}}
    job = train(client, settings, a, spec)
    url = f"/v1/samplers/{job['sampler_id']}/predict"
    x = rng.normal(size=(6, 2)).tolist()
    first = client.post(url, json={"x": x, "n": 30, "seed": 4}, headers=a)
    assert first.status_code == 200, first.text
    out = first.json()
    probs = np.array(out["probs"])
    assert out["task"] == "classification" and out["n_draws"] == 30 and probs.shape == (6, 3)
    np.testing.assert_allclose(probs.sum(1), 1.0, rtol=1e-12)
    np.testing.assert_allclose(out["entropy"], -(probs * np.log(probs)).sum(1), rtol=1e-10)
    assert client.post(url, json={"x": x, "n": 30, "seed": 4}, headers=a).json() == out  # seeded
    assert client.post(url, json={"x": x, "n": 30, "seed": 5}, headers=a).json() != out
    assert client.post(url, json={"x": x}, headers=a).json()["n_draws"] == 100
    # The generative job's own /predict is its sampler's.
    assert client.post(f"/v1/jobs/{job['id']}/predict", json={"x": x, "n": 30, "seed": 4}, headers=a).json() == out

    assert_problem(client.post(url, json={"x": x}, headers=b), 404, "not_found")
    assert_problem(client.post(url, json={"x": x, "n": 1000}, headers=a), 413, "limit_exceeded")
    plain = train(client, settings, a, {"method": "amortized_svgd", "num_particles": 4, "steps": 1,
                                        "target": {"kind": "gaussian", "mean": [0.0], "cov": [[1.0]]}})
    assert_problem(client.post(f"/v1/samplers/{plain['sampler_id']}/predict", json={"x": [[0.0]]}, headers=a),
                   422, "predict_unsupported")


def test_sampler_draws_over_half_the_request_memory_budget_are_refused_up_front(make_client) -> None:
    """A hypernetwork's draws are whole weight vectors and `n` is capped only by n · m: with one input row, n draws
    cost n × draw_bytes (app.api.compute) to generate. Over half of PARVIS_REQUEST_MEMORY_BYTES: 413 before any
    work; under it the same sampler answers."""
    from app.api.compute import draw_bytes

    client, settings = make_client(auth_enabled=True, request_memory_bytes=1024 * 1024)
    with make_session_factory(make_engine(settings.database_url))() as session:
        a = {"Authorization": f"Bearer {create_api_key(session, 'a')}"}
    rng = np.random.default_rng(3)
    X = rng.normal(size=(30, 2))
    job = train(client, settings, a, {"method": "amortized_svgd", "num_particles": 8, "steps": 3,
                                      "target": {"kind": "bnn", "hidden": [5], "dataset": {
                                          "X": X.tolist(), "y": np.sin(X[:, 0]).tolist()}}})
    sampler = client.get(f"/v1/samplers/{job['sampler_id']}", headers=a).json()
    per_draw = draw_bytes(sampler["config"])
    fits = (1024 * 1024) // (2 * per_draw)
    url = f"/v1/samplers/{job['sampler_id']}/predict"
    assert client.post(url, json={"x": [[0.0, 0.0]], "n": fits}, headers=a).status_code == 200
    for route in (url, f"/v1/jobs/{job['id']}/predict"):
        refused = client.post(route, json={"x": [[0.0, 0.0]], "n": fits + 1}, headers=a)
        assert_problem(refused, 413, "limit_exceeded")
        assert "PARVIS_REQUEST_MEMORY_BYTES" in refused.json()["detail"]


def test_openapi_lists_both_predict_routes(client) -> None:
    spec = client.get("/v1/openapi.json").json()
    for path in ("/v1/jobs/{job_id}/predict", "/v1/samplers/{sampler_id}/predict"):
        operation = spec["paths"][path]["post"]
        body = operation["requestBody"]["content"]["application/json"]["schema"]
        assert {"x", "n", "seed", "quantiles"} <= set(body["properties"]) and body["required"] == ["x"]
        assert {"200", "404", "409", "413", "422"} <= set(operation["responses"])


def test_fvi_sampler_predict_matches_its_offline_draws(service) -> None:
    client, settings, a, _ = service
    X = np.linspace(0.0, 3.0, 30)
    spec = {"method": "fvi", "num_particles": 4, "steps": 10,
            "target": {"kind": "function_posterior", "dataset": {"X": X[:, None].tolist(), "y": np.cos(X).tolist()},
                       "prior": {"type": "gp", "lengthscale": 0.5}, "likelihood": {"noise_std": 0.1},
                       "standardize": True},
            "options": {"distill_steps": 10, "n_basis": 6, "latent_dim": 3}}
    job = train(client, settings, a, spec)
    x = [[-0.5], [1.0], [2.5], [4.0]]
    out = client.post(f"/v1/samplers/{job['sampler_id']}/predict", json={"x": x, "n": 25, "seed": 2}, headers=a)
    assert out.status_code == 200, out.text
    sampler = load(client.get(f"/v1/samplers/{job['sampler_id']}/download", headers=a).content)
    f = sampler.sample(25, 2, x).numpy().astype(np.float64)
    model = sampler.config["model"]
    sigma = model["noise"]["std"] * model["standardization"]["y_std"]
    np.testing.assert_allclose(out.json()["mean"], f.mean(0), rtol=1e-12)
    np.testing.assert_allclose(out.json()["std"], np.sqrt(f.var(0) + sigma**2), rtol=1e-12)
    assert client.post(f"/v1/jobs/{job['id']}/predict", json={"x": x, "n": 25, "seed": 2},
                       headers=a).json() == out.json()
    assert_problem(client.post(f"/v1/samplers/{job['sampler_id']}/predict", json={"x": [[1.0, 2.0]]}, headers=a),
                   422, "input_invalid")
