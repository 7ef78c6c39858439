"""`resources.processes` at submit (issue 44): the cap, methods that run as one process, ranks over the particles
they share, what /v1/methods and the job record say; and the store-side pieces of workers.ranks."""

from __future__ import annotations

import json

import pytest
from fastapi.testclient import TestClient

from inference_core import errors
from inference_core.catalog import METHODS
from tests.unit.test_api_jobs import GOOD, assert_problem, queued_messages


@pytest.mark.parametrize(
    ("change", "code", "fragment"),
    [
        ({"resources": {"processes": 9}}, "processes_over_cap", "resources.processes 9 is over this service's cap of 8"),
        ({"method": "nuts", "resources": {"processes": 2}}, "processes_unsupported", "method 'nuts' runs as one"),
        ({"method": "auto", "resources": {"processes": 2}}, "processes_unsupported", "method 'auto' runs as one"),
        # mfvi is data parallel: its ranks share a data target's minibatch rows, which a gaussian has not
        ({"method": "mfvi", "resources": {"processes": 2}}, "processes_unsupported", "shares a data target's rows"),
        ({"num_particles": 3, "resources": {"processes": 4}}, "processes_unsupported", "4 ranks would share 3 particles"),
        ({"resources": {"processes": 0}}, "spec_invalid", "resources.processes"),
        ({"resources": {"processes": 2, "gpus": 2}}, "spec_invalid", "resources.gpus"),
    ],
)
def test_bad_processes_get_422_and_store_nothing(make_client, change: dict, code: str, fragment: str) -> None:
    client, settings = make_client()
    body = assert_problem(client.post("/v1/jobs", json={**GOOD, **change}), 422, code)
    assert fragment in body["detail"]
    assert body["loc"][0] == "resources"
    assert client.get("/v1/jobs").json()["jobs"] == []
    assert queued_messages(settings) == []


def test_the_cap_is_a_setting(make_client) -> None:
    client, _ = make_client(max_processes_per_job=2)
    assert_problem(client.post("/v1/jobs", json={**GOOD, "resources": {"processes": 3}}), 422, "processes_over_cap")
    assert client.post("/v1/jobs", json={**GOOD, "resources": {"processes": 2}}).status_code == 202


def test_the_job_record_says_its_ranks(client: TestClient) -> None:
    one = client.post("/v1/jobs", json=GOOD).json()
    two = client.post("/v1/jobs", json={**GOOD, "resources": {"processes": 2}}).json()
    assert one["ranks"] == 1 and one["spec"]["resources"] == {"processes": 1}
    assert two["ranks"] == 2 and two["spec"]["resources"] == {"processes": 2}
    assert client.get(f"/v1/jobs/{two['id']}").json()["ranks"] == 2


def test_methods_say_how_many_processes_they_take(client: TestClient) -> None:
    listed = {m["name"]: m for m in client.get("/v1/methods").json()["methods"]}
    assert listed.keys() == METHODS.keys()
    for name, method in listed.items():
        if METHODS[name].shares is None:
            assert method["max_processes"] == 1 and method["shares"] is None, name
        else:
            assert method["max_processes"] is None and method["shares"] in {"particles", "scores", "networks", "batch",
                                                                              "data"}, name
    assert listed["svgd"]["shares"] == "particles" and listed["nuts"]["max_processes"] == 1
    assert listed["gfsf"]["shares"] == listed["ksd"]["shares"] == "scores"
    assert listed["mfvi"]["shares"] == "data" and listed["amortized_fsvgd"]["shares"] == "batch"


def test_catalog_agrees_with_the_ranked_methods() -> None:
    """The torch-free catalog says which methods run as ranks; the distributed core says which it implements."""
    from inference_core.distributed import RANKED_METHODS

    assert {name: m.shares for name, m in METHODS.items() if m.shares} == dict(RANKED_METHODS)


class _Store:
    """The two calls of a c10d Store that failure_from_store makes."""

    def __init__(self, values: dict[str, str]):
        self.values = values

    def check(self, keys: list[str]) -> bool:
        return all(key in self.values for key in keys)

    def get(self, key: str) -> bytes:
        return self.values[key].encode()


def test_a_ranks_own_error_is_the_jobs_and_silence_is_rank_failed() -> None:
    from workers.ranks import FAILED_KEY, failure_from_store

    diverged = _Store({FAILED_KEY.format(rank=2): json.dumps({"code": "diverged", "detail": "non-finite at 7"})})
    error = failure_from_store(diverged, 3)
    assert error.code == "diverged" and "rank 2" in error.detail and not isinstance(error, errors.RankFailed)
    assert isinstance(failure_from_store(_Store({}), 3), errors.RankFailed)
    crashed = _Store({FAILED_KEY.format(rank=1): json.dumps({"code": "rank_failed", "detail": "rank 1 failed"})})
    assert isinstance(failure_from_store(crashed, 2), errors.RankFailed)
