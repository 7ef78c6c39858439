"""`/sample` with `return` and `correct`, and the stored `quality` (issue 16), in-process: a generator trained
here, stored the way the worker stores it (quality from `sampler_quality`), answers checked against the
library and against the closed-form Gaussian log-density (scipy, float64)."""

from __future__ import annotations

import io
from types import SimpleNamespace

import numpy as np
import pytest
import scipy.stats as st
import torch

from inference_core.samplers.certificate import corrected_draws, sampler_quality
from inference_core.targets import BuildContext, build_target
from inference_core.training import run
from service.db import make_engine, make_session_factory
from service.job_state import new_id
from service.models import Job
from service.samplers import store_sampler
from service.store import make_store
from tests.unit.test_api_jobs import assert_problem
from workers.runner import json_safe

MEAN, COV = [1.0, -1.0], [[1.0, 0.9], [0.9, 1.0]]
TARGET = {"kind": "gaussian", "mean": MEAN, "cov": COV}


@pytest.fixture(scope="module")
def trained():
    spec = {"method": "gpvi_exact", "target": TARGET, "num_particles": 64, "steps": 30, "seed": 0,
            "options": {"generator": {"hidden": [32], "lambda": 2.0, "activation": "tanh"},
                        "optimizer": {"lr": 5e-3}, "precondition": "none"}}
    return spec, run(spec).method.sampler()


def stored(settings, spec: dict, sampler, quality: dict | None) -> str:
    sessions = make_session_factory(make_engine(settings.database_url))
    store = make_store(settings.artifacts_url)
    with sessions() as session:
        job = Job(id=new_id("job"), tenant_id="local", status="succeeded", method=spec["method"], spec=spec,
                  spec_sha256="0" * 64, max_attempts=1)
        session.add(job)
        session.flush()
        record, artifacts = store_sampler(store, sampler, tenant_id="local", job_id=job.id, method=spec["method"])
        record.quality = quality
        session.add(record)
        session.flush()
        session.add_all(artifacts)
        session.commit()
        return record.id


def test_sample_returns_exact_log_q_and_log_weights(make_client, trained) -> None:
    spec, sampler = trained
    client, settings = make_client()
    target = build_target(TARGET, BuildContext(dtype=torch.float64))
    quality = json_safe(sampler_quality(sampler, target))
    url = f"/v1/samplers/{stored(settings, spec, sampler, quality)}"

    meta = client.get(url).json()
    assert meta["quality"] == quality and meta["quality"]["verdict"] == "usable with correction"

    answer = client.post(url + "/sample", json={"n": 50, "seed": 4, "return": ["log_q", "log_weights"]})
    assert answer.status_code == 200, answer.text
    body = answer.json()
    draws = np.asarray(body["samples"])
    np.testing.assert_array_equal(draws, sampler.sample(50, 4).numpy())
    np.testing.assert_array_equal(body["log_q"], sampler.sample(50, 4, with_log_q=True)[1].numpy())
    log_p = st.multivariate_normal(MEAN, COV).logpdf(draws.astype(np.float64))
    np.testing.assert_allclose(body["log_weights"], log_p - np.asarray(body["log_q"]), rtol=1e-10, atol=1e-10)
    assert body["density"] == "exact" and body["seed"] == 4

    only_q = client.post(url + "/sample", json={"n": 5, "seed": 4, "return": ["log_q"]}).json()
    np.testing.assert_array_equal(only_q["log_q"], sampler.sample(5, 4, with_log_q=True)[1].numpy())
    assert "log_weights" not in only_q


def test_sample_corrections_match_the_library(make_client, trained) -> None:
    spec, sampler = trained
    client, settings = make_client()
    url = f"/v1/samplers/{stored(settings, spec, sampler, None)}"
    target = build_target(TARGET, BuildContext(dtype=torch.float64))
    for method in ("psis", "imh"):
        body = client.post(url + "/sample", json={"n": 40, "seed": 2, "correct": method, "proposals": 400}).json()
        expected = corrected_draws(sampler, target, 40, 2, method, 400)
        np.testing.assert_array_equal(body["samples"], expected.draws.numpy())
        assert body["correction"]["method"] == method and body["correction"]["proposals"] == 400
        key = "pareto_k" if method == "psis" else "acceptance_rate"
        assert body["correction"][key] == pytest.approx(expected.info[key], rel=1e-12)
    npy = client.post(url + "/sample", json={"n": 40, "seed": 2, "correct": "imh", "proposals": 400},
                      headers={"Accept": "application/x-npy"})
    np.testing.assert_array_equal(np.load(io.BytesIO(npy.content), allow_pickle=False), expected.draws.numpy())
    assert float(npy.headers["X-Correction-Acceptance-Rate"]) == pytest.approx(expected.info["acceptance_rate"])
    assert client.app.state.target_cache.loads == 1  # built once, then cached


def test_certificate_requests_that_cannot_be_honoured(make_client, trained) -> None:
    spec, sampler = trained
    client, settings = make_client()
    url = f"/v1/samplers/{stored(settings, spec, sampler, None)}/sample"
    assert_problem(client.post(url, json={"n": 3, "return": ["log_q"]}, headers={"Accept": "application/x-npy"}),
                   422, "return_needs_json")
    assert_problem(client.post(url, json={"n": 3, "proposals": 10}), 422, "proposals_invalid")
    assert_problem(client.post(url, json={"n": 3, "correct": "psis", "proposals": 2}), 422, "proposals_invalid")
    assert client.post(url, json={"n": 3, "correct": "metropolis"}).status_code == 422
    assert client.post(url, json={"n": 3, "return": ["density"]}).status_code == 422

    uploaded = {**spec, "target": {"kind": "bnn", "dataset": "ds_" + "a" * 32, "hidden": [4]}}
    url = f"/v1/samplers/{stored(settings, uploaded, sampler, None)}/sample"
    assert_problem(client.post(url, json={"n": 3, "return": ["log_weights"]}), 422, "log_weights_unavailable")
    assert client.post(url, json={"n": 3, "return": ["log_q"]}).status_code == 200  # log q needs no target


def test_certificate_work_is_capped_before_any_draw(make_client, trained, monkeypatch) -> None:
    from app.api import compute

    spec, sampler = trained
    client, settings = make_client()
    url = f"/v1/samplers/{stored(settings, spec, sampler, None)}/sample"
    # k = 2, hidden [32]: 2·32 + 32·2 = 128 multiply-adds per tangent row, so 1000 proposals cost 256,000
    monkeypatch.setattr(compute, "MAX_JACOBIAN_WORK", 256_000 - 1)
    assert_problem(client.post(url, json={"n": 500, "correct": "psis"}), 413, "limit_exceeded")  # 2n proposals
    assert client.post(url, json={"n": 499, "correct": "psis"}).status_code == 200
    monkeypatch.setattr(compute, "MAX_WEIGHT_ROW_EVALUATIONS", 99)  # a Gaussian counts 1 row per proposal
    assert_problem(client.post(url, json={"n": 50, "correct": "imh"}), 413, "limit_exceeded")


def test_a_job_is_told_what_its_samplers_certificate_found(make_client) -> None:
    """The worker writes the certificate's verdict into the job's own `quality` (`sampler_verdict`), and a sampler
    the certificate calls unreliable makes the job `unreliable` too (`sampler_unreliable`), whatever the job's
    checks of its last ~100-draw batch said. Unreliable: 2 steps from N(0, I) towards N(20·1, I) unwhitened (the
    generator's draws lie 28 sds from the mass: k̂ is infinite). Good: GPVI's defaults start at Pathfinder's
    Gaussian, which is this Gaussian target exactly."""
    from tests.support.inprocess import run_worker

    client, settings = make_client()

    def job_quality(spec: dict) -> tuple[dict, dict]:
        response = client.post("/v1/jobs", json=spec)
        assert response.status_code == 202, response.text
        run_worker(settings, response.json()["id"])
        job = client.get(f"/v1/jobs/{response.json()['id']}").json()
        assert job["status"] == "succeeded", job["error"]
        return job["quality"], client.get(f"/v1/samplers/{job['sampler_id']}").json()["quality"]

    far = {"kind": "gaussian", "mean": [20.0, 20.0], "cov": [[1.0, 0.0], [0.0, 1.0]]}
    bad, bad_certificate = job_quality({"method": "gpvi", "target": far, "steps": 2, "seed": 0,
                                        "options": {"precondition": "none"}})
    assert bad_certificate["verdict"] == "unreliable"
    assert bad["sampler_verdict"] == "unreliable" and bad["verdict"] == "unreliable" and not bad["trustworthy"]
    message = next(w["message"] for w in bad["warnings"] if w["code"] == "sampler_unreliable")
    assert bad_certificate["reason"] in message
    good, good_certificate = job_quality({"method": "gpvi", "target": TARGET, "steps": 20, "seed": 0})
    assert good["sampler_verdict"] == good_certificate["verdict"] == "good", (good, good_certificate)
    assert "sampler_unreliable" not in [w["code"] for w in good["warnings"]]


def test_a_job_is_never_called_better_than_its_sampler() -> None:
    """The merge: `sampler_verdict` always; an unreliable certificate adds `sampler_unreliable`; a certificate
    that says less than the job's checks (`usable with correction`, `unchecked`, or none computed) caps the job's
    verdict at its own (samplers.certificate.VERDICTS, best first), and the job's own block is left as it was."""
    from inference_core.metrics.quality import with_sampler_certificate
    from inference_core.samplers.certificate import VERDICTS

    job = {"ksd": None, "warnings": [], "trustworthy": True, "verdict": "good", "reason": "no warning raised",
           "checks": ["spread_ratio"], "next_steps": []}
    gpvi = SimpleNamespace(name="gpvi", target=SimpleNamespace(dim=2, initial_particles=None), auto_remedy="draws")
    assert with_sampler_certificate(job, None, gpvi) is job
    uncomputed = with_sampler_certificate(job, {"verdict": None, "reason": "the report could not be computed"}, gpvi)
    assert uncomputed["verdict"] == uncomputed["sampler_verdict"] == "unchecked" and not uncomputed["trustworthy"]
    corrected = with_sampler_certificate(job, {"verdict": "usable with correction", "reason": "k̂ 0.6"}, gpvi)
    assert corrected["verdict"] == corrected["sampler_verdict"] == "usable with correction"
    assert "k̂ 0.6" in corrected["reason"] and not corrected["trustworthy"] and corrected["warnings"] == []
    good = with_sampler_certificate(job, {"verdict": "good", "reason": "k̂ 0.2"}, gpvi)
    assert good["verdict"] == "good" and good["trustworthy"]
    bad = with_sampler_certificate(job, {"verdict": "unreliable", "reason": "Pareto k̂ = 3.10 is over"}, gpvi)
    assert bad["verdict"] == "unreliable" and [w["code"] for w in bad["warnings"]] == ["sampler_unreliable"]
    assert "Pareto k̂ = 3.10 is over" in bad["reason"]
    warned = {**job, "warnings": [{"code": "collapsed", "message": "m"}], "verdict": "unreliable"}
    assert with_sampler_certificate(warned, {"verdict": "good", "reason": "k̂ 0.2"}, gpvi)["verdict"] == "unreliable"
    for sampler_verdict in VERDICTS:  # never better, whatever the certificate says
        merged = with_sampler_certificate(job, {"verdict": sampler_verdict, "reason": "r"}, gpvi)
        assert VERDICTS.index(merged["verdict"]) >= VERDICTS.index(sampler_verdict)
    assert job["verdict"] == "good" and job["warnings"] == []  # the job's own block is left as it was
