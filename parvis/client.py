"""`parvis.Client` (blocking) and `parvis.AsyncClient` (asyncio): the HTTP API of docs/api.md for Python.

    client = parvis.Client("http://127.0.0.1:8000")            # api_key=... or PARVIS_API_KEY when auth is on
    job = client.submit({"method": "svgd", "steps": 2000, "target": {...}})
    job = client.wait(job)                                    # live progress bar on stderr; raises if it failed
    x = client.particles(job)                                 # numpy [n, d]
    draws = client.sampler(job).sample(10_000, seed=7)        # generative methods

What both share lives in `parvis.calls` (routes and decoding) and `parvis.progress` (bar, SSE parsing); here
are only the transports: retries, errors, streaming and the waiting loop. No torch is imported.
"""

from __future__ import annotations

import asyncio
import os
import random
import time
from pathlib import Path
from typing import Any

import httpx

from parvis import calls
from parvis.calls import Call, JobRef, Reply
from parvis.errors import (
    ConnectionFailedError,
    JobCancelledError,
    JobFailedError,
    ParvisError,
    WaitTimeoutError,
    error_from_problem,
    retry_after_seconds,
)
from parvis.progress import TERMINAL_STATUSES, EventStreamParser, ProgressBar

DEFAULT_URL = "http://127.0.0.1:8000"
RETRY_STATUSES = frozenset({502, 503, 504})
MAX_RETRY_DELAY_S = 10.0


def _retry_delay(attempt: int, headers: dict[str, str] | None = None) -> float:
    """The server's Retry-After when it gave one, else exponential back-off with jitter, capped."""
    hinted = retry_after_seconds((headers or {}).get("retry-after"))
    if hinted is not None:
        return min(hinted, MAX_RETRY_DELAY_S)
    return min(0.25 * 2 ** attempt, MAX_RETRY_DELAY_S) * (0.5 + random.random() / 2)


def _problem(response: httpx.Response) -> ParvisError:
    try:
        body = response.json()
    except ValueError:
        body = None
    return error_from_problem(response.status_code, body, dict(response.headers))


def _finished(job: dict[str, Any], raise_on_failure: bool) -> dict[str, Any]:
    if raise_on_failure and job["status"] == "failed":
        error = job.get("error") or {}
        raise JobFailedError(error.get("code") or "job_failed",
                             f"job {job['id']} failed: {error.get('detail') or 'no detail'}", job=job)
    if raise_on_failure and job["status"] == "cancelled":
        raise JobCancelledError("cancelled", f"job {job['id']} was cancelled", job=job)
    return job


def _settings(url: str | None, api_key: str | None) -> tuple[str, dict[str, str]]:
    url = (url or os.environ.get("PARVIS_URL") or DEFAULT_URL).rstrip("/")
    api_key = api_key if api_key is not None else os.environ.get("PARVIS_API_KEY")
    headers = {"User-Agent": "parvis-client"}
    if api_key:
        headers["Authorization"] = f"Bearer {api_key}"
    return url, headers


class SamplerHandle:
    """A trained sampler (or the job that trains one): `sample`, `predict`, `download`, `info`. With an
    `AsyncClient` each method returns an awaitable."""

    def __init__(self, client: Client | AsyncClient, ref: JobRef):
        self._client = client
        self.ref = ref

    def sample(self, n: int, seed: int = 0, x: Any = None) -> Any:
        """n fresh draws, float32 numpy [n, d] (or [n, len(x)] function values of a function-space sampler);
        the same n and seed always give the same draws (docs/api.md)."""
        return self._client._run(calls.sample(self.ref, n, seed, x))

    def predict(self, x: Any, n: int | None = None, seed: int = 0, quantiles: list[float] | None = None) -> Any:
        """The sampler's posterior predictive at inputs x (POST /v1/samplers/{id}/predict)."""
        return self._client._run(self._predict(x, n, seed, quantiles))

    def _predict(self, x: Any, n: int | None, seed: int, quantiles: list[float] | None) -> calls.Operation:
        sampler_id = yield from calls.sampler_id_of(self.ref)  # a job's sampler, not the job's own particles
        return (yield from calls.predict(sampler_id, x, n, seed, quantiles))

    def download(self, path: str | Path, format: str = "safetensors") -> Any:
        return self._client._run(calls.download(self.ref, path, format))

    def info(self) -> Any:
        return self._client._run(calls.sampler_info(self.ref))


class _Operations:
    """The API, once for both clients: each method runs an operation of `parvis.calls` through `_run`, which
    returns the value (Client) or an awaitable of it (AsyncClient)."""

    def _run(self, operation: calls.Operation) -> Any:  # pragma: no cover - defined by the subclasses
        raise NotImplementedError

    def submit(self, spec: dict[str, Any] | str | Path, idempotency_key: str | None = None) -> Any:
        """Submit a JobSpec (a dict, or a .json/.yaml file); the accepted job. An `Idempotency-Key` is always
        sent (yours or a fresh one), and retries after a lost connection or a 503 reuse it: one job, never two."""
        from parvis.specs import load_spec

        return self._run(calls.submit(load_spec(spec), idempotency_key))

    def job(self, job: JobRef) -> Any:
        return self._run(calls.get_job(job))

    def jobs(self, status: str | None = None, limit: int = 50) -> Any:
        return self._run(calls.list_jobs(status, limit))

    def cancel(self, job: JobRef) -> Any:
        return self._run(calls.cancel(job))

    def delete(self, job: JobRef) -> Any:
        return self._run(calls.delete_job(job))

    def particles(self, job: JobRef) -> Any:
        """The final particles as a float32 numpy array [n, d] (the `.npy` answer, loaded without pickle)."""
        return self._run(calls.particles(job))

    def metrics(self, job: JobRef, max_points: int | None = None) -> Any:
        """The metric trace as numpy columns {"step", "wall_time_s", name: values}."""
        return self._run(calls.metrics(job, max_points))

    def sampler(self, ref: JobRef) -> SamplerHandle:
        """The sampler of a job (id or dict) or a sampler id; requests happen when its methods are called."""
        return SamplerHandle(self, ref)  # type: ignore[arg-type]

    def samplers(self, limit: int = 50) -> Any:
        return self._run(calls.list_samplers(limit))

    def download(self, sampler: JobRef, path: str | Path, format: str = "safetensors") -> Any:
        """Save a sampler as a `.zip` (config.json + weights.safetensors; `parvis.load_sampler`) or `.onnx`."""
        return self._run(calls.download(sampler, path, format))

    def predict(self, ref: JobRef, x: Any, n: int | None = None, seed: int = 0,
                quantiles: list[float] | None = None) -> Any:
        """Posterior predictive at inputs x of a finished BNN / function-posterior job or a sampler id."""
        return self._run(calls.predict(ref, x, n, seed, quantiles))

    def methods(self) -> Any:
        return self._run(calls.methods())

    def targets(self) -> Any:
        return self._run(calls.target_kinds())

    def validate(self, target: dict[str, Any], points: Any) -> Any:
        return self._run(calls.validate_target(target, points))

    def layout(self, ref: JobRef, dim: int) -> Any:
        return self._run(calls.layout_of(ref, dim))

    def inference_data(self, ref: JobRef, n: int | None = None, seed: int = 0,
                       names: list[str] | None = None) -> Any:
        """An `arviz.InferenceData` of a job's particles, or of n seeded draws of its sampler (`n`, or a
        sampler id), with variables and dims named from the target (`parvis.export`; needs arviz)."""
        from parvis.export import inference_data

        return self._run(inference_data(ref, n, seed, names))


class Client(_Operations):
    """Blocking client. `url` defaults to $PARVIS_URL or http://127.0.0.1:8000, `api_key` to $PARVIS_API_KEY;
    `retries`: how often a safe request is sent again after a lost connection or a 502/503/504."""

    def __init__(self, url: str | None = None, api_key: str | None = None, *, timeout: float = 60.0,
                 retries: int = 4, transport: httpx.BaseTransport | None = None):
        self.url, headers = _settings(url, api_key)
        self.retries = retries
        self._http = httpx.Client(base_url=self.url, headers=headers, timeout=timeout, transport=transport)

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _run(self, operation: calls.Operation) -> Any:
        try:
            call = next(operation)
            while True:
                call = operation.send(self._send(call))
        except StopIteration as stop:
            return stop.value

    def _send(self, call: Call) -> Reply:
        for attempt in range(self.retries + 1):
            last = attempt >= self.retries or not call.retry
            try:
                request = self._http.build_request(call.method, call.path, params=call.params, json=call.json,
                                                   headers={"Accept": call.accept, **call.headers})
                response = self._http.send(request, stream=call.stream_to is not None)
                try:
                    if response.status_code in RETRY_STATUSES and not last:
                        time.sleep(_retry_delay(attempt, dict(response.headers)))
                        continue
                    if response.status_code >= 400:
                        response.read()
                        raise _problem(response)
                    if call.stream_to is not None:
                        _save_stream(response.iter_bytes(), call.stream_to)
                        return Reply(response.status_code, dict(response.headers), b"")
                    return Reply(response.status_code, dict(response.headers), response.content)
                finally:
                    response.close()
            except httpx.TransportError as exc:
                if last:
                    raise ConnectionFailedError("connection_failed", f"could not reach {self.url}: {exc}") from exc
                time.sleep(_retry_delay(attempt))
        raise AssertionError("unreachable")  # pragma: no cover

    def wait(self, job: JobRef, progress: bool = True, *, timeout: float | None = None, poll_interval: float = 0.5,
             use_events: bool = True, raise_on_failure: bool = True, file: Any = None) -> dict[str, Any]:
        """Block until the job finishes; its final state. `progress`: a live bar on stderr (step, loss or KSD,
        ETA). Follows the job's event stream (SSE) and falls back to polling when the stream is refused (429
        `too_many_streams`), fails (5xx) or breaks. Raises JobFailedError / JobCancelledError (with the job's
        error code) unless `raise_on_failure=False`, WaitTimeoutError after `timeout` seconds."""
        job_id = calls.job_id_of(job)
        deadline = None if timeout is None else time.monotonic() + timeout
        bar = ProgressBar(progress, file)
        try:
            state = self._follow_events(job_id, bar, deadline) if use_events else None
            if state is None:
                state = self._poll(job_id, bar, deadline, poll_interval)
            bar.update(state)
        finally:
            bar.close()
        return _finished(state, raise_on_failure)

    def _follow_events(self, job_id: str, bar: ProgressBar, deadline: float | None) -> dict[str, Any] | None:
        """The terminal state from the event stream, or None to fall back to polling."""
        parser = EventStreamParser()
        read_timeout = 30.0 if deadline is None else max(0.1, min(30.0, deadline - time.monotonic()))
        try:
            with self._http.stream("GET", f"/v1/jobs/{job_id}/events", headers={"Accept": "text/event-stream"},
                                   timeout=httpx.Timeout(10.0, read=read_timeout)) as response:
                if response.status_code == 429 or response.status_code >= 500:
                    return None  # too_many_streams, or an outage: polling retries with back-off
                if response.status_code >= 400:
                    response.read()
                    raise _problem(response)
                for line in response.iter_lines():
                    state = parser.feed(line)
                    if state is not None:
                        bar.update(state)
                        if state["status"] in TERMINAL_STATUSES:
                            return state
                    if deadline is not None and time.monotonic() > deadline:
                        raise WaitTimeoutError("wait_timeout", f"job {job_id} did not finish in time")
        except httpx.TransportError:
            if deadline is not None and time.monotonic() > deadline:
                raise WaitTimeoutError("wait_timeout", f"job {job_id} did not finish in time") from None
        return None

    def _poll(self, job_id: str, bar: ProgressBar, deadline: float | None, interval: float) -> dict[str, Any]:
        while True:
            state = self.job(job_id)
            bar.update(state)
            if state["status"] in TERMINAL_STATUSES:
                return state
            if deadline is not None and time.monotonic() > deadline:
                raise WaitTimeoutError("wait_timeout", f"job {job_id} did not finish in time")
            time.sleep(interval)


def _save_stream(chunks: Any, path: Path) -> None:
    partial = path.with_name(path.name + ".part")  # never leave a truncated file under the real name
    with open(partial, "wb") as out:
        for chunk in chunks:
            out.write(chunk)
    partial.replace(path)


async def _save_async_stream(chunks: Any, path: Path) -> None:
    partial = path.with_name(path.name + ".part")
    with open(partial, "wb") as out:  # local writes of network-sized chunks: not worth a thread each
        async for chunk in chunks:
            out.write(chunk)
    partial.replace(path)


class AsyncClient(_Operations):
    """The asyncio twin of `Client`: the same methods, awaited (`await client.wait(job)`)."""

    def __init__(self, url: str | None = None, api_key: str | None = None, *, timeout: float = 60.0,
                 retries: int = 4, transport: httpx.AsyncBaseTransport | None = None):
        self.url, headers = _settings(url, api_key)
        self.retries = retries
        self._http = httpx.AsyncClient(base_url=self.url, headers=headers, timeout=timeout, transport=transport)

    async def aclose(self) -> None:
        await self._http.aclose()

    async def __aenter__(self) -> AsyncClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def _run(self, operation: calls.Operation) -> Any:
        try:
            call = next(operation)
            while True:
                call = operation.send(await self._send(call))
        except StopIteration as stop:
            return stop.value

    async def _send(self, call: Call) -> Reply:
        for attempt in range(self.retries + 1):
            last = attempt >= self.retries or not call.retry
            try:
                request = self._http.build_request(call.method, call.path, params=call.params, json=call.json,
                                                   headers={"Accept": call.accept, **call.headers})
                response = await self._http.send(request, stream=call.stream_to is not None)
                try:
                    if response.status_code in RETRY_STATUSES and not last:
                        await asyncio.sleep(_retry_delay(attempt, dict(response.headers)))
                        continue
                    if response.status_code >= 400:
                        await response.aread()
                        raise _problem(response)
                    if call.stream_to is not None:
                        await _save_async_stream(response.aiter_bytes(), call.stream_to)
                        return Reply(response.status_code, dict(response.headers), b"")
                    return Reply(response.status_code, dict(response.headers), response.content)
                finally:
                    await response.aclose()
            except httpx.TransportError as exc:
                if last:
                    raise ConnectionFailedError("connection_failed", f"could not reach {self.url}: {exc}") from exc
                await asyncio.sleep(_retry_delay(attempt))
        raise AssertionError("unreachable")  # pragma: no cover

    async def wait(self, job: JobRef, progress: bool = True, *, timeout: float | None = None,
                   poll_interval: float = 0.5, use_events: bool = True, raise_on_failure: bool = True,
                   file: Any = None) -> dict[str, Any]:
        """See `Client.wait`."""
        job_id = calls.job_id_of(job)
        bar = ProgressBar(progress, file)
        try:
            async with asyncio.timeout(timeout):
                state = await self._follow_events(job_id, bar) if use_events else None
                if state is None:
                    state = await self._poll(job_id, bar, poll_interval)
            bar.update(state)
        except TimeoutError:
            raise WaitTimeoutError("wait_timeout", f"job {job_id} did not finish in time") from None
        finally:
            bar.close()
        return _finished(state, raise_on_failure)

    async def _follow_events(self, job_id: str, bar: ProgressBar) -> dict[str, Any] | None:
        parser = EventStreamParser()
        try:
            async with self._http.stream("GET", f"/v1/jobs/{job_id}/events",
                                         headers={"Accept": "text/event-stream"},
                                         timeout=httpx.Timeout(10.0, read=30.0)) as response:
                if response.status_code == 429 or response.status_code >= 500:
                    return None  # too_many_streams, or an outage: polling retries with back-off
                if response.status_code >= 400:
                    await response.aread()
                    raise _problem(response)
                async for line in response.aiter_lines():
                    state = parser.feed(line)
                    if state is not None:
                        bar.update(state)
                        if state["status"] in TERMINAL_STATUSES:
                            return state
        except httpx.TransportError:
            pass
        return None

    async def _poll(self, job_id: str, bar: ProgressBar, interval: float) -> dict[str, Any]:
        while True:
            state = await self.job(job_id)
            bar.update(state)
            if state["status"] in TERMINAL_STATUSES:
                return state
            await asyncio.sleep(interval)


__all__ = ["AsyncClient", "Client", "SamplerHandle"]
