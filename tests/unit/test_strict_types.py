"""Strict types through the real app over HTTP (issue 15, item 8): a JSON string or boolean is never taken as a
number, nor a number as a boolean; a JSON integer is still a valid float. Nothing refused is stored."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from service.settings import Settings

GOOD: dict[str, Any] = {
    "method": "svgd",
    "target": {"kind": "gaussian", "mean": [0.0, 1.0], "cov": [[1.0, 0.3], [0.3, 2.0]]},
    "num_particles": 50,
    "steps": 10,
}


def merged(base: dict[str, Any], change: dict[str, Any]) -> dict[str, Any]:
    out = dict(base)
    for key, value in change.items():
        out[key] = merged(out[key], value) if isinstance(value, dict) and isinstance(out.get(key), dict) else value
    return out


def queued_messages(settings: Settings) -> list[Path]:
    return [p for p in (settings.broker_dir / "queue").iterdir() if p.is_file()]


@pytest.mark.parametrize(
    ("change", "code", "loc"),
    [
        ({"num_particles": "10"}, "spec_invalid", ["num_particles"]),
        ({"num_particles": True}, "spec_invalid", ["num_particles"]),
        ({"steps": 10.0}, "spec_invalid", ["steps"]),
        ({"seed": "7"}, "spec_invalid", ["seed"]),
        ({"checkpoint_every": True}, "spec_invalid", ["checkpoint_every"]),
        ({"eval": {"ksd": 1}}, "spec_invalid", ["eval", "ksd"]),
        ({"eval": {"every": "5"}}, "spec_invalid", ["eval", "every"]),
        ({"target": {"mean": ["1.5", 1.0]}}, "target_invalid", ["target", "mean", 0]),
        ({"target": {"mean": [True, 1.0]}}, "target_invalid", ["target", "mean", 0]),
        ({"target": {"kind": "banana", "dim": "3"}}, "target_invalid", ["target", "dim"]),
        ({"options": {"optimizer": {"lr": "1.5"}}}, "method_options_invalid", ["options", "optimizer", "lr"]),
        ({"options": {"optimizer": {"betas": ["0.9", 0.999]}}}, "method_options_invalid",
         ["options", "optimizer", "betas", 0]),
        ({"options": {"kernel": {"bandwidth": {"subsample_size": "100"}}}}, "method_options_invalid",
         ["options", "kernel", "bandwidth", "subsample_size"]),
    ],
)
def test_job_spec_refuses_strings_and_booleans_as_numbers(make_client, change: dict, code: str,
                                                          loc: list) -> None:
    client, settings = make_client()
    spec = merged(GOOD, change)
    if change.get("target", {}).get("kind") == "banana":
        spec["target"] = change["target"]
    response = client.post("/v1/jobs", json=spec)
    assert response.status_code == 422, response.text
    assert response.headers["content-type"] == "application/problem+json"
    body = response.json()
    assert body["code"] == code
    assert body["loc"] == loc
    assert body["detail"].startswith(".".join(str(part) for part in loc) + ": ")
    assert client.get("/v1/jobs").json()["jobs"] == []
    assert queued_messages(settings) == []


def test_json_integers_are_still_floats_and_arrays_still_tuples(make_client) -> None:
    client, _ = make_client()
    spec = merged(GOOD, {"target": {"mean": [0, 1], "cov": [[1, 0], [0, 2]]},
                         "options": {"optimizer": {"lr": 1, "betas": [0.5, 0.9]}, "init": {"scale": 2}}})
    response = client.post("/v1/jobs", json=spec)
    assert response.status_code == 202, response.text
    stored = response.json()["spec"]
    assert stored["target"]["mean"] == [0.0, 1.0]
    assert stored["options"]["optimizer"]["lr"] == 1.0
    assert stored["options"]["optimizer"]["betas"] == [0.5, 0.9]


@pytest.mark.parametrize(("body", "field"), [({"n": "10"}, "n"), ({"n": True}, "n"), ({"n": 10, "seed": "1"}, "seed"),
                                             ({"n": 10.0}, "n")])
def test_sample_request_is_strict(client, body: dict, field: str) -> None:
    response = client.post("/v1/samplers/smp_missing/sample", json=body)
    assert response.status_code == 422, response.text
    assert response.json()["code"] == "request_invalid"
    assert response.json()["detail"].startswith(f"{field}: ")


def test_sample_request_with_good_types_reaches_the_route(client) -> None:
    assert client.post("/v1/samplers/smp_missing/sample", json={"n": 10, "seed": 1}).status_code == 404


@pytest.mark.parametrize("points", [[["1.5", 0.0]], [[True, 0.0]]])
def test_validate_request_is_strict(client, points: list) -> None:
    response = client.post("/v1/targets/validate", json={"target": GOOD["target"], "points": points})
    assert response.status_code == 422, response.text
    assert response.json()["code"] == "request_invalid"
    assert response.json()["detail"].startswith("points.0.0: ")

