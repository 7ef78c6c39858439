"""What each client operation asks of the HTTP API, written once for the sync and the async client.

An operation is a generator that yields `Call`s and receives `Reply`s (the "sans-I/O" style): `Client` drives
it with blocking httpx, `AsyncClient` with awaits, so the routes, bodies and decoding below exist only here.
Routes and formats: docs/api.md.
"""

from __future__ import annotations

import io
import uuid
from collections.abc import Generator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from parvis.errors import ParvisError

NPY = "application/x-npy"
JobRef = str | dict[str, Any]


@dataclass
class Call:
    method: str
    path: str
    params: dict[str, Any] | None = None
    json: Any = None
    headers: dict[str, str] = field(default_factory=dict)
    accept: str = "application/json"
    # Safe to send again after a lost connection or a 502/503/504: reads, idempotent writes (cancel, a submit
    # under its Idempotency-Key) and /sample and /predict, which compute and store nothing.
    retry: bool = True
    stream_to: Path | None = None  # write the body to this file (downloads)


@dataclass
class Reply:
    status: int
    headers: dict[str, str]
    content: bytes

    def json(self) -> Any:
        import json

        return json.loads(self.content)


Operation = Generator[Call, Reply, Any]


def job_id_of(job: JobRef) -> str:
    if isinstance(job, dict):
        return str(job["id"])
    return str(job)


def load_npy(content: bytes) -> np.ndarray:
    return np.load(io.BytesIO(content), allow_pickle=False)


def submit(spec: dict[str, Any], idempotency_key: str | None = None) -> Operation:
    # A key is always sent, so a submit retried after a lost answer returns the first job, never a second one.
    key = idempotency_key or f"parvis-client-{uuid.uuid4()}"
    reply = yield Call("POST", "/v1/jobs", json=spec, headers={"Idempotency-Key": key})
    return reply.json()


def get_job(job: JobRef) -> Operation:
    return (yield Call("GET", f"/v1/jobs/{job_id_of(job)}")).json()


def list_jobs(status: str | None = None, limit: int = 50) -> Operation:
    jobs: list[dict[str, Any]] = []
    token = None
    while len(jobs) < limit:
        params = {"page_size": min(limit - len(jobs), 100), **({"status": status} if status else {}),
                  **({"page_token": token} if token else {})}
        page = (yield Call("GET", "/v1/jobs", params=params)).json()
        jobs.extend(page["jobs"])
        token = page.get("next_page_token")
        if not token or not page["jobs"]:
            break
    return jobs[:limit]


def cancel(job: JobRef) -> Operation:
    return (yield Call("POST", f"/v1/jobs/{job_id_of(job)}/cancel")).json()


def delete_job(job: JobRef) -> Operation:
    yield Call("DELETE", f"/v1/jobs/{job_id_of(job)}", retry=False)


def particles(job: JobRef) -> Operation:
    return load_npy((yield Call("GET", f"/v1/jobs/{job_id_of(job)}/particles", accept=NPY)).content)


def metrics(job: JobRef, max_points: int | None = None) -> Operation:
    """The whole metric trace as columns: {"step": int array, "wall_time_s": ..., name: float array (NaN
    where a point lacks the value)}; page by page (`next_since_step`) unless downsampled to `max_points`."""
    points: list[dict[str, Any]] = []
    since: int | None = None
    while True:
        params = {"max_points": max_points} if max_points else {}
        if since is not None:
            params["since_step"] = since
        page = (yield Call("GET", f"/v1/jobs/{job_id_of(job)}/metrics", params=params)).json()
        points.extend(page["points"])
        since = page.get("next_since_step")
        if since is None or max_points:
            break
    names = sorted({name for point in points for name in point["values"]})
    columns: dict[str, np.ndarray] = {
        "step": np.array([p["step"] for p in points], dtype=np.int64),
        "wall_time_s": np.array([p["wall_time_s"] for p in points], dtype=np.float64),
    }
    for name in names:
        columns[name] = np.array([_number(p["values"].get(name)) for p in points], dtype=np.float64)
    return columns


def _number(value: Any) -> float:
    return float(value) if isinstance(value, int | float) else float("nan")


def sampler_id_of(ref: JobRef) -> Operation:
    """A sampler id from a sampler id, a job id or a job dict (a job's `sampler_id` once it has succeeded)."""
    if isinstance(ref, str) and ref.startswith("smp_"):
        return ref
    job = ref if isinstance(ref, dict) and "sampler_id" in ref else (yield from get_job(ref))
    if job.get("sampler_id"):
        return job["sampler_id"]
    if job.get("status") != "succeeded":
        raise ParvisError("job_not_finished", f"job {job['id']} is {job.get('status')}; its sampler exists once it "
                          "has succeeded (wait for it first)")
    raise ParvisError("sampler_missing", f"job {job['id']} has no sampler: method {job.get('method')!r} is not "
                      "generative (use its particles)")


def sampler_info(ref: JobRef) -> Operation:
    sampler_id = yield from sampler_id_of(ref)
    return (yield Call("GET", f"/v1/samplers/{sampler_id}")).json()


def list_samplers(limit: int = 50) -> Operation:
    return (yield Call("GET", "/v1/samplers", params={"page_size": min(limit, 100)})).json()["samplers"]


def sample(ref: JobRef, n: int, seed: int = 0, x: Any = None) -> Operation:
    sampler_id = yield from sampler_id_of(ref)
    body: dict[str, Any] = {"n": int(n), "seed": int(seed)}
    if x is not None:
        body["x"] = np.asarray(x, dtype=np.float64).reshape(len(x), -1).tolist()
    return load_npy((yield Call("POST", f"/v1/samplers/{sampler_id}/sample", json=body, accept=NPY)).content)


def predict(ref: JobRef, x: Any, n: int | None = None, seed: int = 0,
            quantiles: list[float] | None = None) -> Operation:
    """POST …/predict on a job (`job_…`) or a sampler (`smp_…`); lists in the answer come back as arrays."""
    body: dict[str, Any] = {"x": np.asarray(x, dtype=np.float64).reshape(len(x), -1).tolist(), "seed": int(seed)}
    if n is not None:
        body["n"] = int(n)
    if quantiles is not None:
        body["quantiles"] = [float(q) for q in quantiles]
    ident = job_id_of(ref)
    path = f"/v1/samplers/{ident}/predict" if ident.startswith("smp_") else f"/v1/jobs/{ident}/predict"
    answer = (yield Call("POST", path, json=body)).json()
    return {key: _as_array(value) for key, value in answer.items()}


def _as_array(value: Any) -> Any:
    if isinstance(value, list):
        return np.asarray(value, dtype=np.float64)
    if isinstance(value, dict):
        return {key: _as_array(item) for key, item in value.items()}
    return value


def download(ref: JobRef, path: str | Path, format: str = "safetensors") -> Operation:
    sampler_id = yield from sampler_id_of(ref)
    target = Path(path)
    yield Call("GET", f"/v1/samplers/{sampler_id}/download", params={"format": format}, accept="*/*",
               stream_to=target)
    return target


def methods() -> Operation:
    return (yield Call("GET", "/v1/methods")).json()


def target_kinds() -> Operation:
    return (yield Call("GET", "/v1/targets/kinds")).json()


def validate_target(target: dict[str, Any], points: Any) -> Operation:
    body = {"target": target, "points": np.asarray(points, dtype=np.float64).tolist()}
    return (yield Call("POST", "/v1/targets/validate", json=body)).json()


def layout_of(ref: JobRef, dim: int) -> Operation:
    """The flat weight layout of a BNN's draws ([{"name", "shape", "offset"}]) or None for other targets:
    a sampler's `config.layout`; for a job on a `bnn` target, the layout /v1/targets/validate reports."""
    ident = job_id_of(ref)
    if ident.startswith("smp_"):
        return ((yield from sampler_info(ident)).get("config") or {}).get("layout")
    job = ref if isinstance(ref, dict) and "spec" in ref else (yield from get_job(ident))
    target = job["spec"]["target"]
    if target.get("kind") != "bnn":
        return None
    return (yield from validate_target(target, np.zeros((1, dim)))).get("layout")
