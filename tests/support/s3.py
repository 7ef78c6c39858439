"""A real S3-compatible server for tests: moto's standalone server (`moto_server`) in its own process on a free
loopback port, stopped afterwards. The service talks to it over HTTP exactly as it would to MinIO or AWS."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import threading
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

from tests.support.stack import free_port, wait_for

ACCESS_KEY = "parvis-test"
SECRET_KEY = "parvis-test-secret"
REGION = "us-east-1"


@dataclass
class S3Server:
    endpoint_url: str
    process: subprocess.Popen

    def client(self) -> Any:
        import boto3

        return boto3.session.Session().client("s3", endpoint_url=self.endpoint_url, region_name=REGION,
                                               aws_access_key_id=ACCESS_KEY, aws_secret_access_key=SECRET_KEY)

    def create_bucket(self) -> str:
        name = f"parvis-{uuid.uuid4().hex[:12]}"
        self.client().create_bucket(Bucket=name)
        return name

    def keys(self, bucket: str, prefix: str = "") -> list[str]:
        pages = self.client().get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix)
        return sorted(item["Key"] for page in pages for item in page.get("Contents", []))

    def service_env(self, bucket: str, prefix: str = "artifacts") -> dict[str, str]:
        """What a Parvis process needs to keep its artifacts in `bucket` under `prefix`."""
        return {
            "PARVIS_ARTIFACTS_URL": f"s3://{bucket}/{prefix}",
            "PARVIS_S3_ENDPOINT_URL": self.endpoint_url,
            "PARVIS_S3_REGION": REGION,
            "PARVIS_S3_ACCESS_KEY_ID": ACCESS_KEY,
            "PARVIS_S3_SECRET_ACCESS_KEY": SECRET_KEY,
        }


@contextlib.contextmanager
def running_s3_server(log_dir: Path) -> Iterator[S3Server]:
    port = free_port()
    log = open(log_dir / "moto_server.log", "ab")  # noqa: SIM115 - closed below, after the process
    moto_server = Path(sys.executable).with_name("moto_server")
    command = [str(moto_server)] if moto_server.exists() else [sys.executable, "-m", "moto.server"]
    env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
    process = subprocess.Popen([*command, "-H", "127.0.0.1", "-p", str(port)], stdout=log,
                               stderr=subprocess.STDOUT, env=env, start_new_session=True)
    server = S3Server(f"http://127.0.0.1:{port}", process)
    try:
        def answers() -> bool:
            if process.poll() is not None:
                raise RuntimeError(f"moto_server exited with {process.returncode}; see {log_dir}/moto_server.log")
            try:
                return httpx.get(f"{server.endpoint_url}/moto-api/", timeout=2).status_code < 500
            except httpx.TransportError:
                return False

        wait_for(answers, 60, interval=0.2, what="moto_server to answer")
        yield server
    finally:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout=15)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGKILL)
            process.wait(timeout=10)
        log.close()


class DroppingProxy:
    """A TCP proxy in front of the S3 server that closes the first `drops` connections at once (a network
    blip, a restarting load balancer) and forwards the rest: faults on the wire, not a mocked client."""

    def __init__(self, upstream_port: int, drops: int):
        self.upstream_port = upstream_port
        self.drops_left = drops
        self.dropped = 0
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.endpoint_url = f"http://127.0.0.1:{self.port}"
        self.lock = threading.Lock()
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return  # closed
            with self.lock:
                drop = self.drops_left > 0
                if drop:
                    self.drops_left -= 1
                    self.dropped += 1
            if drop:
                client.close()
                continue
            upstream = socket.create_connection(("127.0.0.1", self.upstream_port))
            for source, sink in ((client, upstream), (upstream, client)):
                threading.Thread(target=self._pipe, args=(source, sink), daemon=True).start()

    @staticmethod
    def _pipe(source: socket.socket, sink: socket.socket) -> None:
        with contextlib.suppress(OSError):
            while chunk := source.recv(65536):
                sink.sendall(chunk)
        with contextlib.suppress(OSError):
            sink.shutdown(socket.SHUT_WR)

    def close(self) -> None:
        self.listener.close()
