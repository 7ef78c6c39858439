"""Artifact store: blobs by key (`jobs/<id>/particles.npy`). Local folder now; S3-compatible later.

Keys are validated (no absolute paths, no `..`) so a key can never address a file outside the root.
Writes are atomic (temporary file + rename), so a reader never sees half an artifact.
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path

_KEY = re.compile(r"^[A-Za-z0-9_\-]+(/[A-Za-z0-9_\-][A-Za-z0-9_.\-]*)*$")


@dataclass(frozen=True)
class StoredBlob:
    key: str
    sha256: str
    size_bytes: int


class ArtifactStore:
    """Interface; see LocalArtifactStore."""

    def put(self, key: str, data: bytes) -> StoredBlob:
        raise NotImplementedError

    def get(self, key: str) -> bytes:
        raise NotImplementedError

    def exists(self, key: str) -> bool:
        raise NotImplementedError

    def delete_prefix(self, prefix: str) -> None:
        raise NotImplementedError


def check_key(key: str) -> str:
    if not _KEY.match(key) or ".." in key.split("/"):
        raise ValueError(f"invalid artifact key {key!r}")
    return key


class LocalArtifactStore(ArtifactStore):
    def __init__(self, root: str | Path):
        self.root = Path(root).expanduser().resolve()
        self.root.mkdir(parents=True, exist_ok=True)

    def _path(self, key: str) -> Path:
        return self.root / check_key(key)

    def put(self, key: str, data: bytes) -> StoredBlob:
        path = self._path(key)
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".tmp-")
        try:
            with os.fdopen(fd, "wb") as handle:
                handle.write(data)
                handle.flush()
                os.fsync(handle.fileno())
            os.replace(tmp, path)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise
        return StoredBlob(key, hashlib.sha256(data).hexdigest(), len(data))

    def get(self, key: str) -> bytes:
        try:
            return self._path(key).read_bytes()
        except FileNotFoundError:
            raise KeyError(key) from None

    def exists(self, key: str) -> bool:
        return self._path(key).is_file()

    def delete_prefix(self, prefix: str) -> None:
        path = self._path(prefix.rstrip("/"))
        if path.is_dir():
            shutil.rmtree(path, ignore_errors=True)
        elif path.is_file():
            path.unlink(missing_ok=True)


def make_store(url: str) -> ArtifactStore:
    if url.startswith("file://"):
        return LocalArtifactStore(url.removeprefix("file://"))
    if "://" in url:
        raise ValueError(f"unsupported artifacts URL scheme in {url!r} (local paths and file:// for now)")
    return LocalArtifactStore(url)
