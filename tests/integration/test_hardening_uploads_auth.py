"""Issue 15, items 1 and 8, against a real uvicorn API process over real HTTP (raw sockets where the timing of
bytes on the wire is the point): decompression bombs, 401 before the body, 408 for stalled bodies, validation
off the event loop, and key revocation through the CLI."""

from __future__ import annotations

import contextlib
import io
import json
import random
import select
import socket
import subprocess
import sys
import threading
import time
import zipfile
from collections.abc import Iterator
from pathlib import Path

import httpx
import numpy as np
import psutil
import pytest

from tests.support.npz_bombs import lying_header, small_npz, zeros_bomb
from tests.support.stack import Stack, assert_problem

MB = 1_000_000
NPZ = {"Content-Type": "application/x-npz"}


def start(root: Path, mode: str = "embedded", **env: str) -> Stack:
    stack = Stack(mode, root, env)
    try:
        stack.migrate()
        stack.start_api()
    except BaseException:
        stack.stop()
        raise
    return stack


@pytest.fixture(scope="module")
def open_stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    """Authentication off (the default): the API alone."""
    stack = start(tmp_path_factory.mktemp("open"))
    yield stack
    stack.stop()


@pytest.fixture(scope="module")
def auth_stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    """Authentication on, and a 2 s body-read timeout so that stalls are seen quickly."""
    stack = start(tmp_path_factory.mktemp("auth"), PARVIS_AUTH_ENABLED="1", PARVIS_BODY_READ_TIMEOUT_SECONDS="2")
    yield stack
    stack.stop()


def cli(stack: Stack, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "app.cli", *args], env=stack.env, capture_output=True, text=True,
                          timeout=120)


def new_key(stack: Stack, tenant: str, name: str = "test") -> str:
    done = cli(stack, "keys", "create", "--tenant", tenant, "--name", name)
    assert done.returncode == 0, done.stderr
    return done.stdout.strip().splitlines()[-1]


def bearer(key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}


# ------------------------------------------------------------------------------------------ memory


@contextlib.contextmanager
def peak_rss_growth(pid: int) -> Iterator[dict[str, int]]:
    """Peak RSS growth of a process over the block: the kernel's high-water mark (reset first through
    /proc/PID/clear_refs) where allowed, and a 2 ms RSS sampler besides."""
    process = psutil.Process(pid)
    baseline = process.memory_info().rss
    hwm_reset = False
    with contextlib.suppress(OSError):
        Path(f"/proc/{pid}/clear_refs").write_text("5")
        hwm_reset = True
    result = {"growth": 0}
    peak = baseline
    stop = threading.Event()

    def sample() -> None:
        nonlocal peak
        while not stop.is_set():
            with contextlib.suppress(psutil.Error):
                peak = max(peak, process.memory_info().rss)
            time.sleep(0.002)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    try:
        yield result
    finally:
        stop.set()
        sampler.join()
        if hwm_reset:
            for line in Path(f"/proc/{pid}/status").read_text().splitlines():
                if line.startswith("VmHWM:"):
                    peak = max(peak, int(line.split()[1]) * 1024)
        result["growth"] = peak - baseline


def test_a_zeros_bomb_is_refused_without_the_api_growing(open_stack: Stack) -> None:
    bomb = zeros_bomb(10_000, 10_000)  # 800 MB of float64 zeros in 778 KB, as np.savez_compressed writes it
    assert len(bomb) < MB
    with peak_rss_growth(open_stack.api.pid) as memory:
        body = assert_problem(open_stack.client.post("/v1/datasets", content=bomb, headers=NPZ), 413,
                              "dataset_too_large")
        files = {"file": ("bomb.npz", bomb, "application/octet-stream")}
        assert_problem(open_stack.client.post("/v1/datasets", files=files), 413, "dataset_too_large")
    assert "268,435,456" in body["detail"]  # the default cap, 256 MiB, is named
    assert memory["growth"] < 200 * MB, f"the API grew by {memory['growth'] / MB:.0f} MB"
    assert open_stack.client.get("/v1/datasets").json()["datasets"] == []


def test_a_large_json_body_is_refused_before_it_is_decoded(tmp_path: Path) -> None:
    """8 M numbers (32 MB of JSON) against a 16 MB parsed-size cap: 413 with the API growing by about the body
    it holds, not by the Python objects json.loads would make of it (~32 bytes a value: 250+ MB)."""
    stack = start(tmp_path, PARVIS_MAX_DATASET_DECOMPRESSED_BYTES=str(16 * MB))
    try:
        values = 8_000_000
        body = b'{"X": [[' + b",".join([b"0.5"] * values) + b"]]}"
        with peak_rss_growth(stack.api.pid) as memory:
            problem = assert_problem(stack.client.post("/v1/datasets", content=body,
                                                       headers={"Content-Type": "application/json"}),
                                     413, "dataset_too_large")
        assert "16,000,000" in problem["detail"] and "64,000,000" in problem["detail"]
        assert memory["growth"] < 3 * len(body), f"the API grew by {memory['growth'] / MB:.0f} MB"
        # Under the cap the same shape still uploads.
        small = b'{"X": [[' + b",".join([b"0.5"] * 1000) + b"]]}"
        assert stack.client.post("/v1/datasets", content=small,
                                 headers={"Content-Type": "application/json"}).status_code == 201
    finally:
        stack.stop()


def test_lying_and_malformed_archives_get_4xx_never_500(open_stack: Stack) -> None:
    client = open_stack.client
    assert_problem(client.post("/v1/datasets", content=lying_header((2_000_000, 10_000)), headers=NPZ), 413,
                   "dataset_too_large")
    assert_problem(client.post("/v1/datasets", content=lying_header((20, 3)), headers=NPZ), 422, "dataset_invalid")
    assert_problem(client.post("/v1/datasets", content=lying_header((2, 2), bytes(64 * 1024)), headers=NPZ), 422,
                   "dataset_invalid")
    valid = small_npz(np.arange(60.0).reshape(20, 3), np.arange(20.0))
    assert_problem(client.post("/v1/datasets", content=valid[: len(valid) // 2], headers=NPZ), 422,
                   "dataset_invalid")
    nested = io.BytesIO()
    with zipfile.ZipFile(nested, "w") as archive:
        archive.writestr("X.npy", valid)
        archive.writestr("notes.txt", b"hello")
    assert_problem(client.post("/v1/datasets", content=nested.getvalue(), headers=NPZ), 422, "dataset_invalid")
    rng = random.Random(8)
    statuses = set()
    for _ in range(40):
        corrupt = bytearray(valid)
        for _ in range(rng.randint(1, 4)):
            corrupt[rng.randrange(len(corrupt))] = rng.randrange(256)
        statuses.add(client.post("/v1/datasets", content=bytes(corrupt), headers=NPZ).status_code)
    assert statuses <= {201, 413, 422}, statuses
    assert client.get("/v1/health/live").status_code == 200


def test_a_normal_npz_still_uploads(open_stack: Stack) -> None:
    X = np.arange(60.0).reshape(20, 3)
    response = open_stack.client.post("/v1/datasets?name=ok", content=small_npz(X, np.arange(20)), headers=NPZ)
    assert response.status_code == 201, response.text
    assert (response.json()["n_rows"], response.json()["n_features"], response.json()["y"]) == (20, 3, "labels")


# -------------------------------------------------------------------------------- auth and body time


def raw_exchange(port: int, head: str, body_parts: list[tuple[bytes, float]] = (), timeout: float = 60
                 ) -> tuple[int, dict]:
    """Send a request head, then body parts, each followed by a pause, on a raw socket (stopping as soon as
    the server answers); read the answer until the server closes. Returns (status, JSON body).

    A byte sent in the instant the server answers and closes is unread on its side, so its kernel resets the
    connection, and the reset can discard the answer before we read it (seen once in CI, after a 408). That
    race is TCP's, not the server's: the exchange is then made once more."""
    try:
        return _raw_exchange_once(port, head, body_parts, timeout)
    except ConnectionResetError:
        return _raw_exchange_once(port, head, body_parts, timeout)


def _raw_exchange_once(port: int, head: str, body_parts: list[tuple[bytes, float]], timeout: float
                       ) -> tuple[int, dict]:
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as sock:
        sock.sendall(head.replace("\n", "\r\n").encode() + b"\r\n")
        for part, pause in body_parts:
            if select.select([sock], [], [], 0)[0]:
                break  # answered already: sending more would only reset the connection
            sock.sendall(part)
            if select.select([sock], [], [], pause)[0]:
                break
        answer = b""
        while chunk := sock.recv(65536):
            answer += chunk
    head_bytes, _, body = answer.partition(b"\r\n\r\n")
    return int(head_bytes.split(b" ", 2)[1]), json.loads(body or b"null")


def upload_head(port: int, key: str, length: int) -> str:
    return (f"POST /v1/datasets HTTP/1.1\nHost: 127.0.0.1:{port}\nAuthorization: Bearer {key}\n"
            f"Content-Type: application/x-npz\nContent-Length: {length}\n")


def test_a_bad_key_gets_401_before_any_body_byte_is_sent(auth_stack: Stack) -> None:
    port = auth_stack.port
    for key in ("pvs_000000000000_not-a-real-key", "garbage"):
        status, body = raw_exchange(port, upload_head(port, key, 50 * MB))
        assert (status, body["code"]) == (401, "unauthorized")
    status, body = raw_exchange(port, f"POST /v1/datasets HTTP/1.1\nHost: x\nContent-Length: {50 * MB}\n")
    assert (status, body["code"]) == (401, "unauthorized")
    # A route with a body model: FastAPI itself would read the whole body before the auth dependency ran.
    status, body = raw_exchange(port, "POST /v1/targets/validate HTTP/1.1\nHost: x\nAuthorization: Bearer bad\n"
                                      f"Content-Type: application/json\nContent-Length: {MB}\n")
    assert (status, body["code"]) == (401, "unauthorized")
    assert auth_stack.client.get("/v1/health/live").status_code == 200  # public paths need no key
    assert auth_stack.client.get("/v1/openapi.json").status_code == 200
    key = new_key(auth_stack, "tenant-a")
    ok = auth_stack.client.post("/v1/datasets", json={"X": [[1.0], [2.0]]}, headers=bearer(key))
    assert ok.status_code == 201, ok.text
    assert auth_stack.client.get("/v1/datasets").status_code == 401


def test_a_stalled_or_trickling_body_gets_408(auth_stack: Stack) -> None:
    port, key = auth_stack.port, new_key(auth_stack, "tenant-b")

    status, body = raw_exchange(port, upload_head(port, key, 10_000), [(b"PK\x03\x04", 0)])  # then nothing
    assert (status, body["code"]) == (408, "request_timeout")
    # one byte every 0.3 s would take 12 s; the limit is 2 s for the whole body. Not every 0.25 s: the 2 s limit
    # then fell on the instant of the 9th byte, whose arrival after the server's close reset the connection and
    # discarded the 408 (CI, 2026-11-27: the exchange and its retry both reset); at 0.3 s the answer comes 0.2 s
    # after a byte and 0.1 s before the next
    status, body = raw_exchange(port, upload_head(port, key, 40), [(b"x", 0.3)] * 40)
    assert (status, body["code"]) == (408, "request_timeout")
    assert auth_stack.client.get("/v1/datasets", headers=bearer(key)).status_code == 200


# --------------------------------------------------------------------------------- keys (CLI + HTTP)


@pytest.mark.parametrize("mode", ["embedded", "cluster"])
def test_a_revoked_key_is_refused_at_its_next_request(mode: str, tmp_path: Path) -> None:
    stack = start(tmp_path / mode, mode, PARVIS_AUTH_ENABLED="1")
    try:
        doomed, kept = new_key(stack, "acme", "doomed"), new_key(stack, "acme", "kept")
        other = new_key(stack, "globex")
        for key in (doomed, kept, other):
            assert stack.client.get("/v1/datasets", headers=bearer(key)).status_code == 200
        listing = cli(stack, "keys", "list")
        assert listing.returncode == 0, listing.stderr
        assert not any(key.split("_", 2)[2] in listing.stdout for key in (doomed, kept, other))  # no secrets
        rows = [line.split("\t") for line in listing.stdout.strip().splitlines()]
        assert rows[0] == ["id", "tenant", "name", "prefix", "created", "revoked"]
        assert {(r[1], r[2], r[5]) for r in rows[1:]} == {("acme", "doomed", "-"), ("acme", "kept", "-"),
                                                          ("globex", "test", "-")}
        only_acme = cli(stack, "keys", "list", "--tenant", "acme").stdout
        assert "globex" not in only_acme and only_acme.count("acme") == 2

        prefix = doomed.split("_")[1]
        revoked = cli(stack, "keys", "revoke", prefix)
        assert revoked.returncode == 0 and revoked.stdout.startswith("revoked key_"), revoked.stderr
        assert_problem(stack.client.get("/v1/datasets", headers=bearer(doomed)), 401, "unauthorized")
        assert "already revoked" in cli(stack, "keys", "revoke", doomed).stdout  # the whole key works too
        assert stack.client.get("/v1/datasets", headers=bearer(kept)).status_code == 200
        key_id = next(r[0] for r in rows[1:] if r[2] == "kept")
        assert cli(stack, "keys", "revoke", key_id).returncode == 0  # by id too
        assert_problem(stack.client.get("/v1/datasets", headers=bearer(kept)), 401, "unauthorized")
        assert stack.client.get("/v1/datasets", headers=bearer(other)).status_code == 200
        after = cli(stack, "keys", "list", "--tenant", "acme").stdout
        assert all(row.split("\t")[5] != "-" for row in after.strip().splitlines()[1:])
        assert cli(stack, "keys", "revoke", "no-such-key").returncode == 1
    finally:
        stack.stop()


# ----------------------------------------------------------------------------- validate off the loop


def heavy_validate_body() -> bytes:
    """A validate request whose parse costs ~0.2 s of CPU (an expression near the length cap and 225,000
    parameter numbers, under the 250,000 cap and the 2 MB body cap) and then fails (422, an unknown name at
    the very end): nearly all its work is parsing, which the route must do off the event loop."""
    terms = " + ".join(f"sin(x[{i % 4}] * {i % 7 + 1}.5)" for i in range(500))
    target = {"kind": "expression", "dim": 4, "params": {"W": [[0.5] * 500 for _ in range(450)]},
              "log_prob": f"-0.5 * sum(x ** 2) + 0.001 * ({terms}) + not_defined"}
    return json.dumps({"target": target, "points": [[0.1, 0.2, 0.3, 0.4]]}).encode()


def cpu_seconds(pid: int) -> tuple[float, float]:
    """(the main thread's, the whole process's) CPU seconds so far; the main thread runs the event loop."""
    process = psutil.Process(pid)
    main = next(t.user_time + t.system_time for t in process.threads() if t.id == pid)
    total = process.cpu_times()
    return main, total.user + total.system  # the process's times include threads that have exited


def test_validate_work_runs_off_the_event_loop(open_stack: Stack) -> None:
    """Where the API process spends the CPU of heavy validates: on the event loop's thread (the main thread),
    every other request waits; measured, the old route spent all of it there, the sync route about a fifth
    (reading the HTTP body and decoding its JSON). CPU accounting, not timing: a busy machine changes neither."""
    url, body, pid = open_stack.base_url, heavy_validate_body(), open_stack.api.pid
    headers = {"Content-Type": "application/json"}
    with httpx.Client(base_url=url, timeout=120) as client:
        assert_problem(client.post("/v1/targets/validate", content=body, headers=headers), 422, "target_invalid")
        main_before, total_before = cpu_seconds(pid)
        for _ in range(5):
            assert_problem(client.post("/v1/targets/validate", content=body, headers=headers), 422,
                           "target_invalid")
        main_after, total_after = cpu_seconds(pid)
        assert client.get("/v1/health/live").status_code == 200
    main, total = main_after - main_before, total_after - total_before
    assert total > 0.2, f"five heavy validates took only {total:.2f} CPU s: the request is not heavy"
    assert main < 0.5 * total, f"{main:.2f} of {total:.2f} CPU s were spent on the event loop's thread"
