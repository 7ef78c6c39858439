"""Function-space (FVI, generator kind "spg") samplers through the API: listed, downloadable (zip and ONNX),
`/sample` with inputs x seeded and bit-identical to the offline `load(zip).sample(n, seed, x)`, and the input
errors."""

from __future__ import annotations

import io

import numpy as np
import pytest

from inference_core.samplers import load
from inference_core.training import run
from service.db import make_engine, make_session_factory
from service.job_state import new_id
from service.models import Job
from service.samplers import store_sampler
from service.store import make_store
from tests.unit.test_api_jobs import assert_problem

X = np.linspace(0.0, 3.0, 30)


@pytest.fixture(scope="module")
def fvi_sampler():
    spec = {"method": "fvi", "num_particles": 4, "steps": 30,
            "target": {"kind": "function_posterior", "dataset": {"X": X[:, None].tolist(), "y": np.cos(X).tolist()},
                       "prior": {"type": "gp", "lengthscale": 0.5}, "likelihood": {"noise_std": 0.1},
                       "standardize": True},
            "options": {"distill_steps": 20, "n_basis": 6, "latent_dim": 3}}
    return run(spec).method.sampler()


def stored(settings, trained, method: str) -> str:
    sessions = make_session_factory(make_engine(settings.database_url))
    store = make_store(settings.artifacts_url)
    with sessions() as session:
        job = Job(id=new_id("job"), tenant_id="local", status="succeeded", method=method, spec={"steps": 5},
                  spec_sha256="0" * 64, max_attempts=1)
        session.add(job)
        session.flush()
        record, artifacts = store_sampler(store, trained, tenant_id="local", job_id=job.id, method=method)
        session.add(record)
        session.flush()
        session.add_all(artifacts)
        session.commit()
        return record.id


def test_fvi_sampler_is_listed_downloadable_and_samples_at_x(make_client, fvi_sampler) -> None:
    client, settings = make_client()
    url = f"/v1/samplers/{stored(settings, fvi_sampler, 'fvi')}"
    listed = client.get("/v1/samplers").json()["samplers"]
    assert [s["method"] for s in listed] == ["fvi"] and listed[0]["noise_dim"] is None
    assert listed[0]["config"]["generator"]["kind"] == "spg"

    blob = client.get(url + "/download").content
    offline = load(blob)
    x = [[0.1], [1.7], [2.9], [4.0]]
    body = {"n": 64, "seed": 5, "x": x}
    first = client.post(url + "/sample", json=body).json()
    assert first["shape"] == [64, 4] and first["seed"] == 5
    npy = client.post(url + "/sample", json=body, headers={"Accept": "application/x-npy"})
    array = np.load(io.BytesIO(npy.content), allow_pickle=False)
    np.testing.assert_array_equal(array, offline.sample(64, 5, np.array(x)).numpy())
    np.testing.assert_array_equal(np.asarray(first["samples"], dtype=np.float32), array)
    other = client.post(url + "/sample", json={**body, "seed": 6}).json()["samples"]
    assert not np.array_equal(np.asarray(other), np.asarray(first["samples"]))
    # the worker stored the ONNX graph: onnxruntime on it reproduces the offline draws (float32 rounding)
    graph = client.get(url + "/download", params={"format": "onnx"})
    assert graph.status_code == 200 and graph.headers["content-type"] == "application/onnx"
    ort = pytest.importorskip("onnxruntime")
    eps_h, eps_a = offline.sample_noise(64, 5)
    (values,) = ort.InferenceSession(graph.content).run(
        ["samples"], {"x": np.asarray(x, np.float32), "eps_h": eps_h.numpy(), "eps_a": eps_a.numpy()})
    np.testing.assert_allclose(values, array, rtol=2e-5, atol=2e-5 * float(np.abs(array).max()))


def test_fvi_sample_input_errors(make_client, fvi_sampler) -> None:
    client, settings = make_client()
    url = f"/v1/samplers/{stored(settings, fvi_sampler, 'fvi')}/sample"
    assert_problem(client.post(url, json={"n": 3}), 422, "x_required")
    assert_problem(client.post(url, json={"n": 3, "x": [[0.0, 1.0]]}), 422, "x_shape_invalid")
    assert_problem(client.post(url, json={"n": 3, "x": []}), 422, "x_shape_invalid")
    nan = b'{"n": 3, "x": [[NaN]]}'
    assert_problem(client.post(url, content=nan, headers={"Content-Type": "application/json"}), 422, "x_nonfinite")
    settings.max_sample_values = 100
    assert_problem(client.post(url, json={"n": 50, "x": [[0.0], [1.0], [2.0]]}), 413, "limit_exceeded")


def test_parameter_samplers_refuse_x(make_client) -> None:
    client, settings = make_client()
    spec = {"method": "gpvi_exact", "target": {"kind": "gaussian", "mean": [0.0, 1.0], "cov": [[1, 0], [0, 1]]},
            "num_particles": 8, "steps": 2, "options": {"generator": {"hidden": []}}}
    url = f"/v1/samplers/{stored(settings, run(spec).method.sampler(), 'gpvi_exact')}/sample"
    assert_problem(client.post(url, json={"n": 3, "x": [[0.0]]}), 422, "x_not_accepted")
    assert client.post(url, json={"n": 3}).json()["shape"] == [3, 2]


def test_fvi_samplers_have_no_density_and_say_why(make_client, fvi_sampler) -> None:
    """Issue 16: no log q, weights or correction for function-space samplers; the library and the API agree."""
    from inference_core.samplers.certificate import sampler_quality
    from inference_core.samplers.density import DensityUnavailable

    with pytest.raises(DensityUnavailable, match="function-space"):
        fvi_sampler.sample(4, 0, [[0.5]], with_log_q=True)
    report = sampler_quality(fvi_sampler, target=None)
    assert report["density"] == "unavailable" and report["verdict"] == "unchecked" and report["importance"] is None
    client, settings = make_client()
    url = f"/v1/samplers/{stored(settings, fvi_sampler, 'fvi')}/sample"
    for extra in ({"return": ["log_q"]}, {"correct": "imh"}):
        assert_problem(client.post(url, json={"n": 4, "x": [[0.5]], **extra}), 422, "density_unavailable")
