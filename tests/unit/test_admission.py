"""One admission per spec per process (inference_core.spec.admit): a submit validates the job spec, its target and
its options once each in the API, and the worker's run once each again; an admitted spec is immutable."""

from __future__ import annotations

from collections import Counter

import numpy as np
import pydantic
import pytest

from inference_core.catalog import METHODS, TARGET_KINDS
from inference_core.spec import JobSpec, admit
from tests.support.inprocess import run_worker

SPEC = {"method": "svgd", "num_particles": 8, "steps": 3,
        "target": {"kind": "bnn", "dataset": None, "hidden": [3]}}


@pytest.fixture
def validations(monkeypatch) -> Counter:
    """Counts every validation of the job spec, the bnn target's schema and svgd's options (their
    `model_validate`, which every check in the API, the worker and the core goes through)."""
    counts: Counter = Counter()
    for name, model in (("spec", JobSpec), ("target", TARGET_KINDS["bnn"].schema),
                        ("options", METHODS["svgd"].schema)):
        original = model.model_validate.__func__

        def counted(cls, *args, _name=name, _original=original, **kwargs):  # noqa: ANN001, ANN202
            counts[_name] += 1
            return _original(cls, *args, **kwargs)

        monkeypatch.setattr(model, "model_validate", classmethod(counted))
    return counts


def upload(client) -> str:  # noqa: ANN001
    rng = np.random.default_rng(0)
    x = rng.normal(size=(20, 2))
    body = {"X": x.tolist(), "y": (x @ [1.0, -1.0]).tolist()}
    response = client.post("/v1/datasets", json=body)
    assert response.status_code == 201, response.text
    return response.json()["id"]


def test_the_api_admits_once_and_the_worker_once(make_client, validations) -> None:
    client, settings = make_client()
    spec = {**SPEC, "target": {**SPEC["target"], "dataset": upload(client)}}
    validations.clear()
    response = client.post("/v1/jobs", json=spec)
    assert response.status_code == 202, response.text
    assert dict(validations) == {"spec": 1, "target": 1, "options": 1}
    validations.clear()
    run_worker(settings, response.json()["id"])
    job = client.get(f"/v1/jobs/{response.json()['id']}").json()
    assert job["status"] == "succeeded", job["error"]
    assert dict(validations) == {"spec": 1, "target": 1, "options": 1}
    # the model's size came from the data set's shape: 2 inputs, 3 hidden units, 1 output, the noise's log γ
    assert job["spec"]["target"]["dataset"] == spec["target"]["dataset"]
    particles = client.get(f"/v1/jobs/{job['id']}/particles").json()
    assert particles["shape"] == [8, 2 * 3 + 3 + 3 + 1 + 1]


def test_an_admitted_spec_cannot_be_edited() -> None:
    admitted = admit({"method": "svgd", "target": {"kind": "gaussian", "mean": [0.0], "cov": [[1.0]]}})
    with pytest.raises(pydantic.ValidationError):
        admitted.spec.steps = 5  # type: ignore[misc]
    with pytest.raises(AttributeError):
        admitted.dim = 3  # type: ignore[misc]
    stored = admitted.normalized()
    stored["steps"] = 5
    assert admitted.normalized()["steps"] == 1000  # a copy: the admitted spec is untouched
