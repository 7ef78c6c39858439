"""Issue 43, item 1, against a real API process over real HTTP: an upload's body goes to a temporary file as it
arrives (the API holds a file under `data_dir/uploads` mid-upload, and no more memory than a chunk), a ~58 MiB
CSV grows the API by about its parsed arrays twice over, not by the body and its text (~+370 MiB before the
streaming), and a body over the limit is refused while it is being sent, the rest unread. After each, the
API holds no temporary file."""

from __future__ import annotations

import json
import os
import select
import socket
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import psutil
import pytest

from tests.integration.test_hardening_uploads_auth import peak_rss_growth
from tests.support.stack import Stack, assert_problem, wait_for

pytestmark = pytest.mark.integration

MiB = 1024 * 1024
LIMIT = 64 * MiB  # PARVIS_MAX_DATASET_BYTES, the default


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    stack = Stack("embedded", tmp_path_factory.mktemp("streaming"))
    try:
        stack.migrate()
        stack.start_api()
        # Torch is imported in the background once the API starts: not while memory is measured.
        wait_for(lambda: stack.client.get("/v1/health/ready").json()["checks"].get("warm"), 120, what="warm-up")
        # A first small upload of each kind: what the first one allocates once is not counted below.
        assert stack.client.post("/v1/datasets", content=b"1,2\n3,4\n", headers={"Content-Type": "text/csv"}
                                 ).status_code == 201
        assert stack.client.post("/v1/datasets", json={"X": [[1.0]]}).status_code == 201
        yield stack
    finally:
        stack.stop()


def upload_files(stack: Stack) -> list[str]:
    """Files the API's processes hold open under its uploads folder (anonymous ones read '#N (deleted)')."""
    uploads = str(stack.data_dir.resolve() / "uploads")
    found = []
    api = psutil.Process(stack.api.pid)
    for process in [api, *api.children(recursive=True)]:
        fd_dir = f"/proc/{process.pid}/fd"
        try:
            fds = os.listdir(fd_dir)
        except OSError:
            continue
        for fd in fds:
            try:
                target = os.readlink(f"{fd_dir}/{fd}")
            except OSError:
                continue
            if target.startswith(uploads):
                found.append(target)
    return found


def no_upload_files(stack: Stack) -> bool:
    # The answer is sent from inside the route's `finally`-guarded block: the file is closed just after.
    return wait_for(lambda: not upload_files(stack), 5, interval=0.05, what="the temporary file to go") and True


def big_csv() -> tuple[bytes, int]:
    """~58 MiB of CSV: 9 full-precision values a row (as pandas writes them), a 10,000-row block repeated."""
    rows = np.random.default_rng(0).normal(size=(10_000, 9)).tolist()
    block = ("\n".join(",".join(repr(value) for value in row) for row in rows) + "\n").encode()
    repeats = 58 * MiB // len(block)
    return block * repeats, 10_000 * repeats


def test_a_58_mib_csv_grows_the_api_by_its_parsed_arrays_not_by_its_text(stack: Stack) -> None:
    """A 57 MiB CSV, 23 MiB once parsed. Before the streaming it grew the API by ~370 MiB (the body, its text, a
    4-byte-a-character StringIO of it, then the arrays). The bound now is the upload's own reservation in the
    decoding budget, `CSV_COPIES` (3) × 8 bytes × its values, ~70 MiB: ~47 MiB are measured (the arrays and
    their validated copy), and holding the raw body beside them would add 57 MiB and pass it."""
    body, rows = big_csv()
    assert 57 * MiB < len(body) <= 58 * MiB
    parsed = rows * 9 * 8
    with peak_rss_growth(stack.api.pid) as memory:
        answer = stack.client.post("/v1/datasets", content=body, headers={"Content-Type": "text/csv"}, timeout=300)
    assert answer.status_code == 201, answer.text
    assert (answer.json()["n_rows"], answer.json()["n_features"]) == (rows, 8)
    print(f"API RSS growth for a {len(body) / MiB:.1f} MiB CSV ({parsed / MiB:.1f} MiB parsed): "
          f"{memory['growth'] / MiB:.0f} MiB")
    assert memory["growth"] < 3 * parsed, f"the API grew by {memory['growth'] / MiB:.0f} MiB"
    assert no_upload_files(stack)


def raw_socket(stack: Stack, head: str) -> socket.socket:
    sock = socket.create_connection(("127.0.0.1", stack.port), timeout=60)
    sock.sendall(head.replace("\n", "\r\n").encode() + b"\r\n")
    return sock


def read_answer(sock: socket.socket) -> tuple[int, dict]:
    answer = b""
    while chunk := sock.recv(65536):
        answer += chunk
        head, _, body = answer.partition(b"\r\n\r\n")
        if body and b"content-length:" in head.lower():
            length = int(head.lower().split(b"content-length:")[1].split(b"\r\n")[0])
            if len(body) >= length:
                break
    head, _, body = answer.partition(b"\r\n\r\n")
    return int(head.split(b" ", 2)[1]), json.loads(body)


def test_a_body_is_on_disk_while_it_arrives_and_gone_after(stack: Stack) -> None:
    """Half of a 20 MiB .npz sent, then a pause: the API holds its temporary file and has not grown by the half
    it was sent; the rest sent, 201, and the file is gone."""
    buffer = Path(stack.data_dir) / "body.npz"
    np.savez(buffer, X=np.random.default_rng(1).normal(size=(1_310_720, 2)))
    body = buffer.read_bytes()
    half = len(body) // 2
    sock = raw_socket(stack, f"POST /v1/datasets HTTP/1.1\nHost: x\nContent-Type: application/x-npz\n"
                             f"Content-Length: {len(body)}\n")
    with sock:
        baseline = psutil.Process(stack.api.pid).memory_info().rss
        sock.sendall(body[:half])
        held = wait_for(lambda: upload_files(stack), 10, what="the API to open the upload's temporary file")
        time.sleep(0.5)  # the half is received and written
        assert len(held) == 1 and held[0].endswith("(deleted)"), held  # anonymous: never a name to leave behind
        assert psutil.Process(stack.api.pid).memory_info().rss - baseline < half / 2
        sock.sendall(body[half:])
        status, answer = read_answer(sock)
    assert status == 201, answer
    assert (answer["n_rows"], answer["n_features"]) == (1_310_720, 2)
    assert no_upload_files(stack)


def test_a_body_over_the_limit_is_refused_while_it_is_sent(stack: Stack) -> None:
    """A chunked body (no Content-Length) that would be four times the limit: 413 once the limit is passed,
    while the client is still sending, which has sent little more than the limit (what the sockets' buffers
    take besides); the API did not grow by what it was sent, and holds no file after."""
    chunk = b"0.5,1.5,2.5\n" * (MiB // 12)
    frame = f"{len(chunk):x}\r\n".encode() + chunk + b"\r\n"
    sock = raw_socket(stack, "POST /v1/datasets HTTP/1.1\nHost: x\nContent-Type: text/csv\n"
                             "Transfer-Encoding: chunked\n")
    sent = 0
    with sock, peak_rss_growth(stack.api.pid) as memory:
        while sent < 4 * LIMIT and not select.select([sock], [], [], 0)[0]:
            try:
                sock.sendall(frame)
            except (BrokenPipeError, ConnectionResetError):
                break
            sent += len(chunk)
        assert sent < 4 * LIMIT, "the API read the whole body"
        status, answer = read_answer(sock)
    assert (status, answer["code"]) == (413, "payload_too_large")
    assert sent < LIMIT + 32 * MiB, f"{sent / MiB:.0f} MiB were sent before the 413"
    assert memory["growth"] < 32 * MiB, f"the API grew by {memory['growth'] / MiB:.0f} MiB"
    assert no_upload_files(stack)
    assert_problem(stack.client.post("/v1/datasets", content=b"1,x\n", headers={"Content-Type": "text/csv"}),
                   422, "dataset_invalid")
    assert no_upload_files(stack)
