"""Dataset routes and the validate route, in-process: uploads in every format, rejections, ownership,
deletion while in use, and jobs that reference uploaded data."""

from __future__ import annotations

import io

import numpy as np
import pytest
from fastapi.testclient import TestClient
from sqlalchemy import update

from inference_core.datasets import dataset_from_npz
from service.api_keys import create_api_key
from service.db import make_engine, make_session_factory
from service.models import Job
from tests.unit.test_api_jobs import assert_problem

RNG = np.random.default_rng(0)
X = RNG.normal(size=(40, 3))
Y = X @ np.array([1.0, -2.0, 0.5]) + 0.1 * RNG.normal(size=40)


def npz_bytes(**arrays: np.ndarray) -> bytes:
    buffer = io.BytesIO()
    np.savez(buffer, **arrays)
    return buffer.getvalue()


def test_upload_json_npz_csv_multipart_and_read_back(make_client) -> None:
    client, settings = make_client()
    made = client.post("/v1/datasets", json={"X": X.tolist(), "y": Y.tolist()}, params={"name": "lin"})
    assert made.status_code == 201, made.text
    body = made.json()
    assert body["id"].startswith("ds_") and body["name"] == "lin"
    assert (body["n_rows"], body["n_features"], body["y"], body["dtype"]) == (40, 3, "float", "float64")
    stored = (settings.data_dir / "artifacts" / "datasets" / body["id"] / "data.npz").read_bytes()
    import hashlib

    assert body["sha256"] == hashlib.sha256(stored).hexdigest() and body["size_bytes"] == len(stored)
    back = dataset_from_npz(stored)
    np.testing.assert_array_equal(back.X, X)
    np.testing.assert_array_equal(back.y, Y)
    assert client.get(f"/v1/datasets/{body['id']}").json() == body

    npz = client.post("/v1/datasets", content=npz_bytes(X=X, y=(Y > 0).astype(np.int64)),
                      headers={"content-type": "application/x-npz"})
    assert npz.status_code == 201 and npz.json()["y"] == "labels" and npz.json()["n_classes"] == 2

    csv = "a,b,c,target\n" + "\n".join(",".join(f"{v:.6f}" for v in (*row, t)) for row, t in zip(X, Y, strict=True))
    made_csv = client.post("/v1/datasets", content=csv.encode(), headers={"content-type": "text/csv"})
    assert made_csv.status_code == 201 and made_csv.json()["n_features"] == 3

    multipart = client.post("/v1/datasets", files={"file": ("data.csv", csv.encode(), "text/csv")},
                            data={"target_column": "a"})
    assert multipart.status_code == 201, multipart.text
    assert multipart.json()["name"] == "data.csv" and multipart.json()["n_features"] == 3

    listed = client.get("/v1/datasets", params={"page_size": 2}).json()
    assert len(listed["datasets"]) == 2 and listed["next_page_token"]


@pytest.mark.parametrize(
    ("content", "content_type", "status", "code", "fragment"),
    [
        (b'{"X": [[1, 2], [3]], "y": [1, 2]}', "application/json", 422, "dataset_invalid", "X"),
        (b'{"X": [[1, NaN]], "y": [1]}', "application/json", 422, "dataset_invalid", "NaN"),
        (b'{"X": [[1, "a"]], "y": [1]}', "application/json", 422, "dataset_invalid", "string"),
        (b'{"X": [[1, 2]], "y": [1, 2]}', "application/json", 422, "dataset_invalid", "y"),
        (b"1,2,3\n4,,6\n", "text/csv", 422, "dataset_invalid", "empty"),
        (b"garbage", "application/x-npz", 422, "dataset_invalid", ""),
        (b"<xml/>", "application/xml", 415, "unsupported_media_type", "unsupported media type"),
    ],
)
def test_bad_uploads_are_rejected_and_nothing_is_stored(make_client, content, content_type, status, code,
                                                        fragment) -> None:
    client, settings = make_client()
    body = assert_problem(client.post("/v1/datasets", content=content, headers={"content-type": content_type}),
                          status, code)
    assert fragment.lower() in body["detail"].lower()
    assert client.get("/v1/datasets").json()["datasets"] == []
    assert not (settings.data_dir / "artifacts" / "datasets").exists() or not any(
        (settings.data_dir / "artifacts" / "datasets").iterdir())


def test_object_arrays_in_npz_are_refused_without_unpickling(make_client) -> None:
    client, _ = make_client()
    evil = npz_bytes(X=np.array([[1, object()]], dtype=object))
    body = assert_problem(client.post("/v1/datasets", content=evil, headers={"content-type": "application/x-npz"}),
                          422, "dataset_invalid")
    assert "object" in body["detail"].lower()


def test_oversized_upload_is_413(make_client) -> None:
    client, _ = make_client(max_dataset_bytes=50_000)
    big = {"X": RNG.normal(size=(3000, 3)).tolist()}
    assert_problem(client.post("/v1/datasets", json=big), 413, "payload_too_large")
    assert client.get("/v1/datasets").json()["datasets"] == []


def test_jobs_use_own_datasets_and_in_use_datasets_cannot_be_deleted(make_client) -> None:
    client, settings = make_client(auth_enabled=True)
    sessions = make_session_factory(make_engine(settings.database_url))
    with sessions() as session:
        a = {"Authorization": f"Bearer {create_api_key(session, 'a')}"}
        b = {"Authorization": f"Bearer {create_api_key(session, 'b')}"}
    dataset_id = client.post("/v1/datasets", json={"X": X.tolist(), "y": Y.tolist()}, headers=a).json()["id"]
    spec = {"method": "svgd", "num_particles": 10, "steps": 5,
            "target": {"kind": "bayesian_linear_regression", "dataset": dataset_id, "prior_std": 1.0}}
    assert_problem(client.post("/v1/jobs", json=spec, headers=b), 422, "dataset_unknown")
    assert_problem(client.get(f"/v1/datasets/{dataset_id}", headers=b), 404, "not_found")
    assert_problem(client.delete(f"/v1/datasets/{dataset_id}", headers=b), 404, "not_found")

    job = client.post("/v1/jobs", json=spec, headers=a)
    assert job.status_code == 202, job.text
    assert_problem(client.delete(f"/v1/datasets/{dataset_id}", headers=a), 409, "dataset_in_use")
    with sessions() as session:  # the job finishes
        session.execute(update(Job).values(status="succeeded"))
        session.commit()
    assert client.delete(f"/v1/datasets/{dataset_id}", headers=a).status_code == 204
    assert_problem(client.get(f"/v1/datasets/{dataset_id}", headers=a), 404, "not_found")


def test_dimension_cap_uses_the_uploaded_shape(make_client) -> None:
    client, _ = make_client(max_dim=2)
    dataset_id = client.post("/v1/datasets", json={"X": X.tolist(), "y": Y.tolist()}).json()["id"]
    spec = {"method": "svgd", "target": {"kind": "bayesian_linear_regression", "dataset": dataset_id}}
    body = assert_problem(client.post("/v1/jobs", json=spec), 422, "limit_exceeded")
    assert "dimension 3" in body["detail"]


def test_validate_returns_log_density_and_score(client: TestClient) -> None:
    mean, cov = np.array([1.0, -1.0]), np.array([[2.0, 0.3], [0.3, 1.0]])
    points = [[0.0, 0.0], [1.0, 2.0], [-3.0, 0.5]]
    body = client.post("/v1/targets/validate", json={
        "target": {"kind": "gaussian", "mean": mean.tolist(), "cov": cov.tolist()}, "points": points}).json()
    precision = np.linalg.inv(cov)
    expected = [-0.5 * (p - mean) @ precision @ (p - mean) - 0.5 * np.log(np.linalg.det(2 * np.pi * cov))
                for p in np.asarray(points)]
    np.testing.assert_allclose(body["log_prob"], expected, rtol=1e-12)
    np.testing.assert_allclose(body["score"], [-(precision @ (p - mean)) for p in np.asarray(points)], rtol=1e-12)
    assert body["dim"] == 2 and body["finite"] is True and body["layout"] is None


def test_validate_flags_non_finite_and_reports_layouts(client: TestClient) -> None:
    body = client.post("/v1/targets/validate", json={
        "target": {"kind": "expression", "dim": 1, "log_prob": "log(x[0])"}, "points": [[1.0], [-1.0]]}).json()
    assert body["finite"] is False and body["log_prob"][0] == 0.0 and body["log_prob"][1] is None
    bnn = {"kind": "bnn", "dataset": {"X": X[:10].tolist(), "y": Y[:10].tolist()}, "hidden": [4]}
    dim = 3 * 4 + 4 + 4 * 1 + 1 + 1  # layer0 weight+bias, layer1 weight+bias, log noise precision
    out = client.post("/v1/targets/validate", json={"target": bnn, "points": [[0.1] * dim]}).json()
    assert out["dim"] == dim
    assert [b["name"] for b in out["layout"]][:2] == ["layer0.weight", "layer0.bias"]
    assert out["layout"][0] == {"name": "layer0.weight", "shape": [4, 3], "offset": 0}
    assert_problem(client.post("/v1/targets/validate", json={
        "target": {"kind": "gaussian", "mean": [0, 0], "cov": [[1, 0], [0, 1]]}, "points": [[1.0]]}),
        422, "points_invalid")
    assert_problem(client.post("/v1/targets/validate", json={
        "target": {"kind": "expression", "dim": 1, "log_prob": "__import__('os')"}, "points": [[1.0]]}),
        422, "target_invalid")
