"""The dashboard's server side over real HTTP (uvicorn in a subprocess, authentication on): the job-scoped
density grid against log-densities computed here independently in NumPy/SciPy, its limits and problem codes,
tenant isolation, and the `/ui` page and assets served from the package without a key and without a CDN."""

from __future__ import annotations

import math
import re
from collections.abc import Iterator

import numpy as np
import pytest
from scipy.stats import multivariate_normal

from tests.support.stack import Stack, tenant_key

pytestmark = pytest.mark.integration

GRID_CAP = 40
BANANA = {"kind": "banana", "dim": 2, "curvature": 0.1, "scale": 2.0}
GAUSSIAN = {"kind": "gaussian", "mean": [1.0, -2.0], "cov": [[2.0, 0.6], [0.6, 0.5]]}


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    """The API alone (no worker: the density needs only the job's spec, so queued jobs do)."""
    stack = Stack("embedded", tmp_path_factory.mktemp("dashboard"),
                  {"PARVIS_AUTH_ENABLED": "1", "PARVIS_MAX_DENSITY_GRID": str(GRID_CAP)})
    try:
        stack.migrate()
        stack.start_api()
        yield stack
    finally:
        stack.stop()


@pytest.fixture(scope="module")
def acme(stack: Stack) -> dict[str, str]:
    return tenant_key(stack, "acme")


def submit(stack: Stack, key: dict[str, str], target: dict) -> str:
    response = stack.submit({"method": "svgd", "target": target, "num_particles": 10, "steps": 10}, headers=key)
    assert response.status_code == 202, response.text
    return response.json()["id"]


def density(stack: Stack, key: dict[str, str], job_id: str, **query: object):
    params = {"x_min": -3, "x_max": 4, "y_min": -5, "y_max": 3, **query}
    return stack.client.get(f"/v1/jobs/{job_id}/density", params=params, headers=key)


def problem(response, status: int, code: str) -> str:  # noqa: ANN001
    assert response.status_code == status, response.text
    assert response.headers["content-type"].startswith("application/problem+json")
    assert response.json()["code"] == code
    return response.json()["detail"]


def banana_log_density(x1: np.ndarray, x2: np.ndarray, b: float, s: float) -> np.ndarray:
    """x1 ~ N(0, s²), x2 | x1 ~ N(b (x1² − s²), 1), written out from the model (not from the target's code)."""
    return (-0.5 * (x1 / s) ** 2 - math.log(s * math.sqrt(2 * math.pi))
            - 0.5 * (x2 - b * (x1**2 - s**2)) ** 2 - 0.5 * math.log(2 * math.pi))


def test_the_grid_holds_the_targets_log_density(stack: Stack, acme: dict[str, str]) -> None:
    for target, reference in (
        (BANANA, lambda x, y: banana_log_density(x, y, BANANA["curvature"], BANANA["scale"])),
        (GAUSSIAN, lambda x, y: multivariate_normal(GAUSSIAN["mean"], GAUSSIAN["cov"]).logpdf(
            np.stack([x, y], axis=-1))),
    ):
        job_id = submit(stack, acme, target)
        response = density(stack, acme, job_id, grid=33)
        assert response.status_code == 200, response.text
        body = response.json()
        np.testing.assert_allclose(body["x"], np.linspace(-3, 4, 33), rtol=0, atol=1e-12)
        np.testing.assert_allclose(body["y"], np.linspace(-5, 3, 33), rtol=0, atol=1e-12)
        mesh_x, mesh_y = np.meshgrid(body["x"], body["y"])  # row i: y[i]
        want = reference(mesh_x, mesh_y)
        got = np.array(body["log_prob"], dtype=np.float64)
        assert got.shape == (33, 33)
        np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12)
        assert body["max_log_prob"] == pytest.approx(want.max(), rel=1e-12)
        assert body["job_id"] == job_id


def test_a_target_whose_dimension_comes_from_an_uploaded_data_set(stack: Stack, acme: dict[str, str]) -> None:
    """Logistic regression on one feature plus a bias: 2-D once the data set is read (the spec alone does not
    say), so the route builds it through the tenant's data-set loader."""
    rng = np.random.default_rng(0)
    x = rng.normal(size=30)
    t = (rng.uniform(size=30) < 1 / (1 + np.exp(-(1.5 * x - 0.5)))).astype(float)
    upload = stack.client.post("/v1/datasets", json={"X": x[:, None].tolist(), "y": t.tolist()}, headers=acme)
    assert upload.status_code == 201, upload.text
    target = {"kind": "bayesian_logistic_regression", "dataset": upload.json()["id"], "prior_std": 2.0}
    body = density(stack, acme, submit(stack, acme, target), grid=21).json()
    w, b = np.meshgrid(body["x"], body["y"])  # the feature's weight, then the bias (the last column)
    z = w[..., None] * x + b[..., None]
    log_prior = -0.5 * (w**2 + b**2) / 4.0 - 2 * (math.log(2.0) + 0.5 * math.log(2 * math.pi))
    want = (t * z - np.logaddexp(0.0, z)).sum(-1) + log_prior
    np.testing.assert_allclose(np.array(body["log_prob"], dtype=np.float64), want, rtol=1e-12, atol=1e-10)


def test_non_finite_log_densities_come_back_as_null(stack: Stack, acme: dict[str, str]) -> None:
    # log(1 − |x|²): finite inside the unit disc, NaN (log of a negative number) outside it.
    job_id = submit(stack, acme, {"kind": "expression", "dim": 2, "log_prob": "log(1 - sum(square(x)))"})
    response = density(stack, acme, job_id, x_min=-1.5, x_max=1.5, y_min=-1.5, y_max=1.5, grid=11)
    assert response.status_code == 200, response.text
    body = response.json()
    inside = 0
    for i, y in enumerate(body["y"]):
        for j, x in enumerate(body["x"]):
            r2 = x * x + y * y
            if r2 < 1 - 1e-9:
                inside += 1
                assert body["log_prob"][i][j] == pytest.approx(math.log(1 - r2), rel=1e-12, abs=1e-12)
            elif r2 > 1 + 1e-9:
                assert body["log_prob"][i][j] is None
    assert inside > 20
    assert body["max_log_prob"] == pytest.approx(0.0, abs=1e-12)  # at the origin, a grid point


def test_limits_and_problem_codes(stack: Stack, acme: dict[str, str]) -> None:
    job_id = submit(stack, acme, BANANA)
    assert density(stack, acme, job_id, grid=GRID_CAP).status_code == 200
    assert "between 2 and 40" in problem(density(stack, acme, job_id, grid=GRID_CAP + 1), 422, "limit_exceeded")
    problem(density(stack, acme, job_id, grid=1), 422, "limit_exceeded")
    problem(density(stack, acme, job_id, x_min=2, x_max=2), 422, "bounds_invalid")
    problem(density(stack, acme, job_id, y_min=3, y_max=-3), 422, "bounds_invalid")
    problem(density(stack, acme, job_id, x_min=-1e308, x_max=1e308), 422, "bounds_invalid")  # width overflows
    for bad in ("nan", "inf", "-inf"):
        assert density(stack, acme, job_id, x_min=bad).status_code == 422
    missing = stack.client.get(f"/v1/jobs/{job_id}/density", params={"x_min": 0, "x_max": 1}, headers=acme)
    problem(missing, 422, "request_invalid")
    three_d = submit(stack, acme, {"kind": "gaussian", "mean": [0, 0, 0], "cov": [[1, 0, 0], [0, 1, 0], [0, 0, 1]]})
    assert "dimension 3" in problem(density(stack, acme, three_d), 422, "density_unsupported")
    problem(density(stack, acme, "job_doesnotexist"), 404, "not_found")
    problem(density(stack, {}, job_id), 401, "unauthorized")


def test_another_tenants_job_is_not_found(stack: Stack, acme: dict[str, str]) -> None:
    job_id = submit(stack, acme, GAUSSIAN)
    other = tenant_key(stack, "globex")
    problem(density(stack, other, job_id), 404, "not_found")
    assert density(stack, acme, job_id).status_code == 200


def test_the_density_route_is_documented(stack: Stack) -> None:
    operation = stack.client.get("/v1/openapi.json").json()["paths"]["/v1/jobs/{job_id}/density"]["get"]
    assert {"401", "404", "410", "422"} <= set(operation["responses"])
    assert {p["name"] for p in operation["parameters"]} >= {"x_min", "x_max", "y_min", "y_max", "grid"}


def test_the_ui_is_served_from_the_package_without_a_key(stack: Stack) -> None:
    redirect = stack.client.get("/ui", follow_redirects=False)
    assert redirect.status_code in (307, 308) and redirect.headers["location"].endswith("/ui/")
    page = stack.client.get("/ui/")
    assert page.status_code == 200 and page.headers["content-type"].startswith("text/html")
    assert 'data-auth="true"' in page.text  # the page asks for the key before its first call
    assets = re.findall(r'(?:src|href)="(static/[^"]+)"', page.text)
    assert {"static/app.js", "static/vendor/uplot/uPlot.iife.min.js", "static/vendor/uplot/uPlot.min.css"} <= set(assets)
    sources = [page.text]
    for asset in [*assets, "static/api.js", "static/plots.js"]:
        response = stack.client.get(f"/ui/{asset}")
        assert response.status_code == 200, asset
        if asset.endswith(".js"):  # browsers run module scripts only with a JavaScript media type
            assert response.headers["content-type"].split(";")[0] in ("text/javascript", "application/javascript")
        sources.append(response.text)
    ours = "\n".join(sources[:1] + [s for a, s in zip([*assets, "static/api.js", "static/plots.js"], sources[1:],
                                                        strict=True) if "vendor" not in a])
    assert not re.search(r"(?:src|href)=\"(?:https?:)?//|fetch\(\s*[\"']https?:|import .* from [\"']https?:", ours)
    assert stack.client.get("/ui/static/vendor/uplot/LICENSE").status_code == 200
    assert stack.client.get("/v1/jobs").status_code == 401  # the data still needs the key
