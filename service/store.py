"""Artifact store: blobs by key (`jobs/<id>/particles.npy`), in a local folder or an S3-compatible bucket.

Keys are validated (no absolute paths, no `..`) so a key can never address a file outside the root.
Writes are atomic (local: temporary file + rename; S3: a PUT is atomic), so a reader never sees half an
artifact. A missing key raises KeyError in both stores.
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from service.settings import Settings

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


def _missing_is_fine(function: Any, path: str, exc_info: Any) -> None:
    if not issubclass(exc_info[0], FileNotFoundError):
        raise exc_info[1]


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
        """Raises when something could not be deleted (the caller retries it: service/retention.py); what is
        already gone, also by a concurrent delete, is not an error."""
        path = self._path(prefix.rstrip("/"))
        if path.is_dir():
            shutil.rmtree(path, onerror=_missing_is_fine)
        elif path.is_file():
            path.unlink(missing_ok=True)


class S3ArtifactStore(ArtifactStore):
    """Blobs as objects `<prefix>/<key>` in one bucket of any S3-compatible service (AWS S3, MinIO, ...).

    Endpoint and credentials left as None fall back to boto3's own chain (AWS_* variables, config files,
    instance roles). botocore retries throttling, 5xx and connection errors (`standard` mode) before an
    error reaches the caller.
    """

    def __init__(self, bucket: str, prefix: str = "", *, endpoint_url: str | None = None,
                 region: str | None = None, access_key_id: str | None = None,
                 secret_access_key: str | None = None, max_attempts: int = 5):
        import boto3
        from botocore.config import Config

        if not bucket:
            raise ValueError("an s3:// artifacts URL needs a bucket name (s3://bucket/prefix)")
        self.bucket = bucket
        self.prefix = check_key(prefix.strip("/")) if prefix.strip("/") else ""
        config = Config(retries={"max_attempts": max_attempts, "mode": "standard"}, connect_timeout=10,
                        read_timeout=120,
                        # path-style URLs: MinIO and other self-hosted servers have no per-bucket DNS names
                        s3={"addressing_style": "path"} if endpoint_url else None)
        # A session of its own: boto3's default session is not thread-safe, a client is.
        self.client = boto3.session.Session().client(
            "s3", endpoint_url=endpoint_url, region_name=region, aws_access_key_id=access_key_id,
            aws_secret_access_key=secret_access_key, config=config)

    def _name(self, key: str) -> str:
        key = check_key(key)
        return f"{self.prefix}/{key}" if self.prefix else key

    @staticmethod
    def _is_missing(exc: Exception) -> bool:
        error = getattr(exc, "response", {}).get("Error", {})
        return str(error.get("Code")) in {"NoSuchKey", "404", "NotFound"}

    def put(self, key: str, data: bytes) -> StoredBlob:
        self.client.put_object(Bucket=self.bucket, Key=self._name(key), Body=data)
        return StoredBlob(key, hashlib.sha256(data).hexdigest(), len(data))

    def get(self, key: str) -> bytes:
        from botocore.exceptions import ClientError

        try:
            response = self.client.get_object(Bucket=self.bucket, Key=self._name(key))
        except ClientError as exc:
            if self._is_missing(exc):
                raise KeyError(key) from None
            raise
        with response["Body"] as body:
            return body.read()

    def exists(self, key: str) -> bool:
        from botocore.exceptions import ClientError

        try:
            self.client.head_object(Bucket=self.bucket, Key=self._name(key))
        except ClientError as exc:
            if self._is_missing(exc):
                return False
            raise
        return True

    def delete_prefix(self, prefix: str) -> None:
        """Delete the object `prefix` and everything under `prefix/` (never `prefix-other/...`), as the
        local store removes one file or one folder."""
        name = self._name(prefix.rstrip("/"))
        doomed: list[dict[str, Any]] = [{"Key": name}]  # deleting an absent key is not an error in S3
        paginator = self.client.get_paginator("list_objects_v2")
        for page in paginator.paginate(Bucket=self.bucket, Prefix=f"{name}/"):
            doomed.extend({"Key": item["Key"]} for item in page.get("Contents", []))
        for start in range(0, len(doomed), 1000):  # DeleteObjects takes at most 1000 keys
            response = self.client.delete_objects(Bucket=self.bucket,
                                                   Delete={"Objects": doomed[start:start + 1000], "Quiet": True})
            if response.get("Errors"):
                first = response["Errors"][0]
                raise OSError(f"could not delete {len(response['Errors'])} artifact object(s) under {prefix!r}: "
                              f"{first.get('Key')}: {first.get('Code')} {first.get('Message')}")


def make_store(url: str, settings: Settings | None = None) -> ArtifactStore:
    """A local path or file:// URL → LocalArtifactStore; s3://bucket/prefix → S3ArtifactStore, connected with
    the `s3_*` settings (default: this process's settings)."""
    if url.startswith("s3://"):
        if settings is None:
            from service.settings import get_settings

            settings = get_settings()
        bucket, _, prefix = url.removeprefix("s3://").partition("/")
        return S3ArtifactStore(bucket, prefix, endpoint_url=settings.s3_endpoint_url or None,
                               region=settings.s3_region or None,
                               access_key_id=settings.s3_access_key_id or None,
                               secret_access_key=settings.s3_secret_access_key.get_secret_value() or None,
                               max_attempts=settings.s3_max_attempts)
    if url.startswith("file://"):
        return LocalArtifactStore(url.removeprefix("file://"))
    if "://" in url:
        raise ValueError(f"unsupported artifacts URL scheme in {url!r} (a local path, file:// or s3://)")
    return LocalArtifactStore(url)
