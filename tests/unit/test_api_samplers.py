"""Sampler routes in-process: a real trained generator stored the way the worker stores it; tenancy,
the LRU cache, and deletion."""

from __future__ import annotations

import io

import numpy as np
import pytest

from inference_core.training import run
from service.api_keys import create_api_key
from service.db import make_engine, make_session_factory
from service.job_state import new_id
from service.models import Job
from service.samplers import store_sampler
from service.store import make_store
from tests.unit.test_api_jobs import assert_problem


@pytest.fixture(scope="module")
def trained_sampler():
    spec = {"method": "gpvi_exact", "target": {"kind": "gaussian", "mean": [0.0, 1.0], "cov": [[1, 0.3], [0.3, 1]]},
            "num_particles": 16, "steps": 5, "options": {"generator": {"hidden": []}}}
    return run(spec).method.sampler()


def test_sampler_routes_are_tenant_scoped_and_cached(make_client, trained_sampler) -> None:
    client, settings = make_client(auth_enabled=True)
    sessions = make_session_factory(make_engine(settings.database_url))
    store = make_store(settings.artifacts_url)
    with sessions() as session:
        a = {"Authorization": f"Bearer {create_api_key(session, 'a')}"}
        b = {"Authorization": f"Bearer {create_api_key(session, 'b')}"}
        job = Job(id=new_id("job"), tenant_id="a", status="succeeded", method="gpvi_exact", spec={"steps": 5},
                  spec_sha256="0" * 64, max_attempts=1)
        session.add(job)
        session.flush()
        record, artifacts = store_sampler(store, trained_sampler, tenant_id="a", job_id=job.id, method="gpvi_exact")
        session.add(record)
        session.flush()
        session.add_all(artifacts)
        session.commit()
        sampler_id = record.id

    url = f"/v1/samplers/{sampler_id}"
    for method, path, body in [("GET", "", None), ("POST", "/sample", {"n": 3}), ("GET", "/download", None),
                               ("DELETE", "", None)]:
        assert_problem(client.request(method, url + path, json=body, headers=b), 404, "not_found")
    assert client.get("/v1/samplers", headers=b).json()["samplers"] == []

    meta = client.get(url, headers=a).json()
    assert meta["dim"] == 2 and meta["noise_dim"] == trained_sampler.config["generator"]["noise_dim"]
    assert client.get(f"/v1/jobs/{meta['job_id']}", headers=a).json()["sampler_id"] == sampler_id

    cache = client.app.state.sampler_cache
    draws = [client.post(url + "/sample", json={"n": 100, "seed": 3}, headers={**a, "Accept": "application/x-npy"})
             for _ in range(3)]
    arrays = [np.load(io.BytesIO(r.content), allow_pickle=False) for r in draws]
    assert all(np.array_equal(arrays[0], x) for x in arrays[1:])
    np.testing.assert_array_equal(arrays[0], trained_sampler.sample(100, 3).numpy())
    assert (cache.misses, cache.hits) == (1, 2)

    assert client.delete(url, headers=a).status_code == 204
    assert_problem(client.get(url, headers=a), 404, "not_found")
    assert not (settings.data_dir / "artifacts" / "samplers" / sampler_id).exists()
    assert client.get(f"/v1/jobs/{meta['job_id']}", headers=a).json()["sampler_id"] is None


def test_sampler_cache_evicts_least_recently_used() -> None:
    from app.api.sampler_cache import SamplerCache

    cache = SamplerCache(capacity=2)
    loads = []
    for key in ["a", "b", "a", "c", "b"]:
        cache.get(key, lambda k=key: loads.append(k) or k)
    assert loads == ["a", "b", "c", "b"]  # "b" was evicted by "c" (LRU), "a" was still warm
