"""Issue 43, item 4: what a hostile black-box probe found, each fixed and checked here (in-process app on
SQLite, and a real uvicorn in a thread for the event stream):

- #7  integer query parameters are bounded (422 `request_invalid`, stated in the OpenAPI document), never a
      database overflow (`since_step=1e30` was a 500 that reset the connection);
- #9  an open event stream ends soon after its API key is revoked, with an `event: error` problem;
- #10 an `Idempotency-Key` is compared on the requested `retention_seconds` too;
- #11 a prediction that is not finite is 422 `output_nonfinite`, not a 200 of nulls;
- #12 `/ui` and its assets carry a strict CSP, `X-Frame-Options`, `X-Content-Type-Options`, `Referrer-Policy`.
"""

from __future__ import annotations

import json
import re
import threading
import time
from importlib.resources import files
from pathlib import Path

import httpx
import numpy as np
import pytest
import uvicorn

from app.api.compute import check_prediction_finite
from app.api.pagination import QUERY_INT_MAX
from app.api.problems import Problem
from app.api.retention import MAX_RETENTION_SECONDS
from app.main import create_app
from service.api_keys import create_api_key, revoke_api_key
from service.db import make_engine, make_session_factory
from service.migrate import upgrade
from service.settings import Settings
from tests.support.stack import free_port, wait_for
from tests.unit.test_api_jobs import GOOD, assert_problem

HUGE = (str(10**30), "1e30", str(2**63), str(QUERY_INT_MAX + 1))


@pytest.fixture
def keyed(make_client):
    """The app with authentication on and a key of tenant `a`."""
    client, settings = make_client(auth_enabled=True)
    with make_session_factory(make_engine(settings.database_url))() as session:
        headers = {"Authorization": f"Bearer {create_api_key(session, 'a')}"}
    return client, settings, headers


# --- #7: integer query parameters are bounded ---------------------------------------------------------------


def test_huge_integer_query_parameters_are_422_and_the_next_request_works(keyed) -> None:
    client, _, auth = keyed
    job_id = client.post("/v1/jobs", json=GOOD, headers=auth).json()["id"]
    for value in HUGE:
        for url in (f"/v1/jobs/{job_id}/metrics?since_step={value}", f"/v1/jobs/{job_id}/metrics?limit={value}",
                    f"/v1/jobs/{job_id}/metrics?max_points={value}", f"/v1/jobs?page_size={value}",
                    f"/v1/datasets?page_size={value}", f"/v1/samplers?page_size={value}",
                    f"/v1/jobs/{job_id}/density?x_min=0&x_max=1&y_min=0&y_max=1&grid={value}"):
            response = client.get(url, headers=auth)
            assert response.status_code == 422, (url, response.text)
            assert response.json()["code"] in ("request_invalid", "limit_exceeded"), (url, response.text)
        assert_problem(client.post(f"/v1/jobs?retention_seconds={value}", json=GOOD, headers=auth),
                       422, "request_invalid")
        assert_problem(client.post(f"/v1/datasets?retention_seconds={value}", json={"X": [[1.0]]},
                                   headers=auth), 422, "request_invalid")
    # The largest accepted values still answer (no overflow below the bound either).
    assert client.get(f"/v1/jobs/{job_id}/metrics?since_step={QUERY_INT_MAX}&limit={QUERY_INT_MAX}",
                      headers=auth).json()["points"] == []
    assert client.get(f"/v1/jobs?page_size={QUERY_INT_MAX}", headers=auth).status_code == 200
    assert client.get(f"/v1/jobs/{job_id}", headers=auth).status_code == 200


def test_the_document_states_the_bounds(keyed) -> None:
    client, _, _ = keyed
    document = client.get("/v1/openapi.json").json()

    def parameter(path: str, method: str, name: str) -> dict:
        found = next(p for p in document["paths"][path][method]["parameters"] if p["name"] == name)
        return next(b for b in found["schema"].get("anyOf", [found["schema"]]) if b.get("type") != "null")

    for path, name in (("/v1/jobs/{job_id}/metrics", "since_step"), ("/v1/jobs/{job_id}/metrics", "limit"),
                       ("/v1/jobs", "page_size"), ("/v1/datasets", "page_size"), ("/v1/samplers", "page_size")):
        schema = parameter(path, "get", name)
        assert schema["type"] == "integer" and schema["maximum"] == QUERY_INT_MAX and "minimum" in schema, name
    for path in ("/v1/jobs", "/v1/datasets"):
        assert parameter(path, "post", "retention_seconds")["maximum"] == MAX_RETENTION_SECONDS
    grid = parameter("/v1/jobs/{job_id}/density", "get", "grid")
    assert (grid["minimum"], grid["maximum"]) == (2, 200)
    assert set(parameter("/v1/jobs", "get", "status")["enum"]) == {"queued", "running", "succeeded", "failed",
                                                                   "cancelled"}
    assert parameter("/v1/samplers/{sampler_id}/download", "get", "format")["enum"] == ["safetensors", "onnx"]
    spec = document["components"]["schemas"]["JobSpec"]["properties"]
    assert "svgd" in spec["method"]["enum"] and "gaussian" in spec["target"]["properties"]["kind"]["enum"]


# --- #10: an Idempotency-Key covers the requested retention ---------------------------------------------------


def test_idempotency_key_is_compared_on_the_requested_retention(keyed) -> None:
    client, _, auth = keyed

    def submit(key: str, retention: int | None = None):
        query = "" if retention is None else f"?retention_seconds={retention}"
        return client.post(f"/v1/jobs{query}", json=GOOD, headers={**auth, "Idempotency-Key": key})

    first = submit("with-retention", 3600)
    assert first.status_code == 202, first.text
    replay = submit("with-retention", 3600)
    assert replay.status_code == 200 and replay.json()["id"] == first.json()["id"]
    assert replay.json()["expires_at"] == first.json()["expires_at"]
    for other in (7200, None):
        body = assert_problem(submit("with-retention", other), 422, "idempotency_key_reused")
        assert "retention_seconds" in body["detail"]
    # No retention both times: a plain replay, as before.
    plain = submit("without-retention")
    assert plain.status_code == 202, plain.text
    again = submit("without-retention")
    assert again.status_code == 200 and again.json()["id"] == plain.json()["id"]
    assert_problem(submit("without-retention", 3600), 422, "idempotency_key_reused")
    assert len(client.get("/v1/jobs", headers=auth).json()["jobs"]) == 2


# --- #11: a non-finite prediction is a 422 -------------------------------------------------------------------


def test_check_prediction_finite_names_the_rows() -> None:
    finite = {"task": "regression", "n_draws": 3, "mean": np.zeros(3), "std": np.ones(3),
              "std_epistemic": np.ones(3), "quantile_levels": [0.5], "quantiles": np.zeros((1, 3))}
    check_prediction_finite(finite)  # no error
    bad = {**finite, "mean": np.array([0.0, np.inf, 0.0]), "quantiles": np.array([[0.0, 0.0, np.nan]])}
    with pytest.raises(Problem) as raised:
        check_prediction_finite(bad)
    assert raised.value.status == 422 and raised.value.code == "output_nonfinite"
    assert raised.value.extra["rows"] == [1, 2] and "row(s) 1, 2" in raised.value.detail
    probs = {"task": "classification", "n_draws": 2, "probs": np.array([[0.5, 0.5], [np.nan, np.nan]]),
             "entropy": np.array([0.7, np.nan])}
    with pytest.raises(Problem) as raised:
        check_prediction_finite(probs)
    assert raised.value.extra["rows"] == [1]


def test_predict_with_overflowing_inputs_is_422_output_nonfinite(keyed) -> None:
    from tests.unit.test_api_predict import train

    client, settings, auth = keyed
    rng = np.random.default_rng(0)
    X = rng.uniform(-2, 2, size=(30, 1))
    y = np.sin(X[:, 0]) + 0.1 * rng.normal(size=30)
    dataset = client.post("/v1/datasets", json={"X": X.tolist(), "y": y.tolist()}, headers=auth).json()["id"]
    job = train(client, settings, auth, {"method": "svgd", "num_particles": 4, "steps": 5, "seed": 1,
                                         "target": {"kind": "bnn", "dataset": dataset, "hidden": [4]}})
    url = f"/v1/jobs/{job['id']}/predict"
    assert client.post(url, json={"x": [[0.5]]}, headers=auth).status_code == 200
    body = assert_problem(client.post(url, json={"x": [[0.5], [1e308], [-1e308]]}, headers=auth),
                          422, "output_nonfinite")
    assert body["rows"] == [1, 2] and "row(s) 1, 2" in body["detail"]


# --- #12: the dashboard's security headers -------------------------------------------------------------------


def test_the_dashboard_and_its_assets_carry_security_headers(client) -> None:
    for url in ("/ui/", "/ui/static/app.js", "/ui/static/style.css", "/ui/static/vendor/uplot/uPlot.iife.min.js"):
        response = client.get(url)
        assert response.status_code == 200, url
        csp = response.headers["content-security-policy"]
        assert "frame-ancestors 'none'" in csp and "script-src 'self'" in csp and "unsafe-inline" not in csp
        assert "object-src 'none'" in csp and "default-src 'self'" in csp
        assert response.headers["x-frame-options"] == "DENY"
        assert response.headers["x-content-type-options"] == "nosniff"
        assert response.headers["referrer-policy"] == "no-referrer"
    assert client.get("/ui", follow_redirects=False).headers["x-frame-options"] == "DENY"
    assert "content-security-policy" not in client.get("/v1/health/live").headers  # the API is not a page


def test_the_page_has_nothing_inline_that_the_policy_would_block() -> None:
    page = (files("app.ui") / "index.html").read_text(encoding="utf-8")
    scripts = re.findall(r"<script\b[^>]*>(.*?)</script>", page, flags=re.S | re.I)
    assert scripts and all(body.strip() == "" for body in scripts)
    assert all("src=" in tag for tag in re.findall(r"<script\b[^>]*>", page, flags=re.I))
    assert not re.search(r"<style\b|\sstyle\s*=|\son[a-z]+\s*=|javascript:", page, flags=re.I)


# --- #9: a revoked key's event stream ends --------------------------------------------------------------------


def test_an_open_event_stream_ends_when_its_key_is_revoked(tmp_path: Path) -> None:
    settings = Settings(data_dir=tmp_path, auth_enabled=True)
    upgrade(settings.database_url)
    engine = make_engine(settings.database_url)
    sessions = make_session_factory(engine)
    with sessions() as session:
        doomed, kept = create_api_key(session, "a"), create_api_key(session, "a")
    server = uvicorn.Server(uvicorn.Config(create_app(settings), host="127.0.0.1", port=free_port(),
                                           log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    try:
        wait_for(lambda: server.started, 60, what="uvicorn to start")
        with httpx.Client(base_url=f"http://127.0.0.1:{server.config.port}", timeout=20) as client:
            job = client.post("/v1/jobs", json=GOOD, headers={"Authorization": f"Bearer {doomed}"})
            assert job.status_code == 202, job.text  # no worker: it stays queued, the stream stays open
            url = f"/v1/jobs/{job.json()['id']}/events?poll_seconds=0.1"
            with client.stream("GET", url, headers={"Authorization": f"Bearer {doomed}"}) as doomed_stream, \
                    client.stream("GET", url, headers={"Authorization": f"Bearer {kept}"}) as kept_stream:
                assert doomed_stream.status_code == 200 and kept_stream.status_code == 200
                doomed_lines, kept_lines = doomed_stream.iter_lines(), kept_stream.iter_lines()
                assert next(doomed_lines) == "id: 1" and next(doomed_lines) == "event: job"
                time.sleep(1.5)  # a few key checks pass while the key is valid
                with sessions() as session:
                    assert revoke_api_key(session, doomed)[1]
                revoked_at = time.monotonic()
                rest = list(doomed_lines)  # the stream ends (the server closes it)
                assert time.monotonic() - revoked_at < 5, "the stream went on after the revoke"
                events = [block for block in "\n".join(rest).split("\n\n") if "event:" in block]
                assert events and "event: error" in events[-1], rest
                problem = json.loads(events[-1].split("data: ", 1)[1])
                assert problem["status"] == 401 and problem["code"] == "unauthorized"
                assert {"type", "title", "detail", "request_id"} <= problem.keys()
                # The other key's stream on the same job goes on.
                assert next(kept_lines) == "id: 1" and next(kept_lines) == "event: job"
            assert client.get(f"/v1/jobs/{job.json()['id']}",
                              headers={"Authorization": f"Bearer {doomed}"}).status_code == 401
    finally:
        server.should_exit = True
        thread.join(timeout=30)
        engine.dispose()
