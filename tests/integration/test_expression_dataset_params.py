"""Expression params from an uploaded data set, over real HTTP (API + worker, authentication on, both modes):
a CSV is uploaded, an `expression` job names its columns, the worker resolves them, and the answer matches a
conjugate Gaussian linear regression's closed form; a data set too large to send inline (the request cap) works
by reference; a wrong column is a 422 `target_invalid` at submit, and another tenant's data set answers exactly
like one that does not exist (422 `dataset_unknown`). The data set is linked to the job (409 on delete)."""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import pytest

from tests.integration.conftest import MODES
from tests.support.stack import Stack, assert_problem, tenant_key, wait_for

pytestmark = pytest.mark.integration

RNG = np.random.default_rng(41)
X = RNG.normal(size=(30, 2))
Y = X @ np.array([0.7, -1.2]) + 0.2 * RNG.normal(size=30)
NOISE, PRIOR = 0.2, 10.0
LOG_PROB = f"sum(log_normal(y, A @ x, {NOISE})) + sum(log_normal(x, 0, {PRIOR}))"
CSV = {"Content-Type": "text/csv"}


def csv_text(features: np.ndarray, y: np.ndarray) -> str:
    header = ",".join([f"x{j + 1}" for j in range(features.shape[1])] + ["y"])
    rows = (",".join(f"{value:.17g}" for value in row) for row in np.column_stack([features, y]))
    return header + "\n" + "\n".join(rows) + "\n"


def regression_target(dataset_id: str, columns: list | str = "X") -> dict:
    return {"kind": "expression", "dim": 2, "log_prob": LOG_PROB,
            "params": {"A": {"dataset": dataset_id, "columns": columns}, "y": {"dataset": dataset_id, "column": "y"}}}


def closed_form_log_density(points: np.ndarray, features: np.ndarray, y: np.ndarray) -> np.ndarray:
    """The same log-density written out with numpy (normal log-likelihood plus the N(0, 10²) prior)."""
    residual = y[None, :] - points @ features.T
    likelihood = -0.5 * (residual / NOISE) ** 2 - np.log(NOISE * np.sqrt(2 * np.pi))
    prior = -0.5 * (points / PRIOR) ** 2 - np.log(PRIOR * np.sqrt(2 * np.pi))
    return likelihood.sum(1) + prior.sum(1)


@pytest.fixture(scope="module", params=MODES)
def stack(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    service = Stack(request.param, tmp_path_factory.mktemp(request.param), {"PARVIS_AUTH_ENABLED": "1"})
    try:
        service.migrate()
        service.start_api()
        service.start_worker()
        yield service
    except BaseException:
        print(service.log_tail())
        raise
    finally:
        service.stop()


@pytest.fixture(scope="module")
def keys(stack: Stack) -> dict[str, dict[str, str]]:
    return {"a": tenant_key(stack, "tenant-a"), "b": tenant_key(stack, "tenant-b")}


@pytest.fixture(scope="module")
def uploaded(stack: Stack, keys: dict) -> dict:
    response = stack.client.post("/v1/datasets?name=regression", content=csv_text(X, Y), headers={**CSV, **keys["a"]})
    assert response.status_code == 201, response.text
    body = response.json()
    assert (body["n_rows"], body["n_features"], body["y"]) == (30, 2, "float")
    return body


def wait(stack: Stack, job_id: str, key: dict[str, str]) -> dict:
    """The job once finished (the stack's own wait_status sends no key)."""

    def finished() -> dict | None:
        job = stack.client.get(f"/v1/jobs/{job_id}", headers=key).json()
        return job if job["status"] in ("succeeded", "failed", "cancelled") else None

    return wait_for(finished, 180, interval=0.2, what=f"job {job_id} to finish")


def test_a_job_over_uploaded_columns_matches_the_conjugate_posterior(stack: Stack, keys: dict, uploaded: dict) -> None:
    target = regression_target(uploaded["id"])
    # the worker-side resolution, evaluated exactly: /validate builds the target as a job does
    points = RNG.normal(size=(4, 2))
    checked = stack.client.post("/v1/targets/validate", json={"target": target, "points": points.tolist(),
                                                               "dtype": "float64"}, headers=keys["a"])
    assert checked.status_code == 200, checked.text
    np.testing.assert_allclose(checked.json()["log_prob"], closed_form_log_density(points, X, Y), rtol=1e-12)

    spec = {"method": "svgd", "num_particles": 100, "steps": 1500, "seed": 2, "target": target}
    response = stack.submit(spec, headers=keys["a"])
    assert response.status_code == 202, response.text
    job_id = response.json()["id"]
    assert response.json()["spec"]["target"]["params"]["A"] == {"dataset": uploaded["id"], "column": None,
                                                               "columns": "X"}
    job = wait(stack, job_id, keys["a"])
    assert job["status"] == "succeeded", (job["error"], stack.log_tail())
    particles = np.asarray(stack.client.get(f"/v1/jobs/{job_id}/particles", headers=keys["a"]).json()["particles"])
    precision = X.T @ X / NOISE**2 + np.eye(2) / PRIOR**2
    cov = np.linalg.inv(precision)
    mean = cov @ X.T @ Y / NOISE**2
    assert np.all(np.abs(particles.mean(0) - mean) < 0.2 * np.sqrt(np.diag(cov))), (particles.mean(0), mean)


def test_data_over_the_request_cap_goes_by_reference(stack: Stack, keys: dict) -> None:
    rows = 60_000  # ~2.3 MB of CSV: the same numbers inline are over the 2 MiB request cap
    features = RNG.normal(size=(rows, 2))
    y = features @ np.array([0.7, -1.2]) + NOISE * RNG.normal(size=rows)
    inline = {"kind": "expression", "dim": 2, "log_prob": LOG_PROB,
              "params": {"A": features.tolist(), "y": y.tolist()}}
    assert_problem(stack.submit({"method": "svgd", "target": inline}, headers=keys["a"]), 413, "payload_too_large")
    text = csv_text(features, y)
    assert len(text) > 2 * 1024 * 1024
    response = stack.client.post("/v1/datasets", content=text, headers={**CSV, **keys["a"]})
    assert response.status_code == 201, response.text
    target = regression_target(response.json()["id"], [0, 1])
    points = np.array([[0.7, -1.2], [0.0, 0.0]])
    checked = stack.client.post("/v1/targets/validate", json={"target": target, "points": points.tolist(),
                                                               "dtype": "float64"}, headers=keys["a"])
    assert checked.status_code == 200, checked.text
    np.testing.assert_allclose(checked.json()["log_prob"], closed_form_log_density(points, features, y), rtol=1e-11)
    job = stack.submit({"method": "svgd", "num_particles": 20, "steps": 5, "target": target}, headers=keys["a"])
    assert job.status_code == 202, job.text
    assert wait(stack, job.json()["id"], keys["a"])["status"] == "succeeded"


def test_a_wrong_column_or_shape_is_a_422_at_submit(stack: Stack, keys: dict, uploaded: dict) -> None:
    before = stack.client.get("/v1/jobs", headers=keys["a"]).json()["jobs"]
    wrong_column = assert_problem(stack.submit({"method": "svgd", "target": regression_target(uploaded["id"], [0, 2])},
                                        headers=keys["a"]), 422, "target_invalid")
    assert wrong_column["loc"] == ["target", "params", "A"]
    assert "column 2 is not a column of the data set: use 'y' or a feature index 0..1" in wrong_column["detail"]
    shape = regression_target(uploaded["id"], [0])  # a 30x1 matrix against x of length 2
    body = assert_problem(stack.submit({"method": "svgd", "target": shape}, headers=keys["a"]), 422, "target_invalid")
    assert body["loc"] == ["target", "log_prob"] and "@ cannot combine a 30x1 matrix" in body["detail"]
    # /validate answers the same
    assert_problem(stack.client.post("/v1/targets/validate", json={"target": shape, "points": [[0.0, 0.0]]},
                              headers=keys["a"]), 422, "target_invalid")
    assert stack.client.get("/v1/jobs", headers=keys["a"]).json()["jobs"] == before  # nothing was queued


def test_another_tenants_data_set_answers_like_a_missing_one(stack: Stack, keys: dict, uploaded: dict) -> None:
    missing = "ds_" + "0" * 32
    bodies = []
    for dataset_id in (uploaded["id"], missing):
        for columns in ("X", [0, 99]):  # even a wrong column: nothing about the data set is read
            body = assert_problem(stack.submit({"method": "svgd", "target": regression_target(dataset_id, columns)},
                                        headers=keys["b"]), 422, "dataset_unknown")
            body["detail"] = body["detail"].replace(dataset_id, "<id>")
            bodies.append({key: value for key, value in body.items() if key != "request_id"})
    assert all(body == bodies[0] for body in bodies), bodies
    assert stack.client.get("/v1/jobs", headers=keys["b"]).json()["jobs"] == []


def test_the_data_set_is_linked_to_the_job_that_uses_it(stack: Stack, keys: dict, uploaded: dict) -> None:
    spec = {"method": "svgd", "num_particles": 10, "steps": 1_000_000, "target": regression_target(uploaded["id"])}
    job_id = stack.submit(spec, headers=keys["a"]).json()["id"]
    assert_problem(stack.client.delete(f"/v1/datasets/{uploaded['id']}", headers=keys["a"]), 409, "dataset_in_use")
    assert stack.client.post(f"/v1/jobs/{job_id}/cancel", headers=keys["a"]).status_code == 202
    assert wait(stack, job_id, keys["a"])["status"] == "cancelled"
