"""One contract for every artifact store: the local folder and an S3 bucket on a real S3-compatible server
(moto_server in its own process, over HTTP)."""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from service.settings import Settings
from service.store import ArtifactStore, LocalArtifactStore, S3ArtifactStore, make_store
from tests.support.s3 import DroppingProxy, S3Server, running_s3_server


@pytest.fixture(scope="module")
def s3_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[S3Server]:
    with running_s3_server(tmp_path_factory.mktemp("moto")) as server:
        yield server


# The S3 half spawns a server process: marked integration like the other tests that do.
@pytest.fixture(params=["local", pytest.param("s3", marks=pytest.mark.integration)])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> ArtifactStore:
    if request.param == "local":
        return make_store(str(tmp_path / "artifacts"))
    server: S3Server = request.getfixturevalue("s3_server")
    bucket = server.create_bucket()
    env = server.service_env(bucket, prefix="tenant-root")
    settings = Settings(data_dir=tmp_path, artifacts_url=env["PARVIS_ARTIFACTS_URL"],
                        s3_endpoint_url=env["PARVIS_S3_ENDPOINT_URL"], s3_region=env["PARVIS_S3_REGION"],
                        s3_access_key_id=env["PARVIS_S3_ACCESS_KEY_ID"],
                        s3_secret_access_key=env["PARVIS_S3_SECRET_ACCESS_KEY"])
    made = make_store(settings.artifacts_url, settings)
    assert isinstance(made, S3ArtifactStore) and made.bucket == bucket and made.prefix == "tenant-root"
    return made


def test_put_get_roundtrip_reports_digest_and_size(store: ArtifactStore) -> None:
    data = bytes(range(256)) * 1000
    blob = store.put("jobs/job_1/particles.npy", data)
    assert blob.key == "jobs/job_1/particles.npy"
    assert blob.sha256 == hashlib.sha256(data).hexdigest() and blob.size_bytes == len(data)
    assert store.get("jobs/job_1/particles.npy") == data
    assert store.put("jobs/job_1/empty.bin", b"").size_bytes == 0
    assert store.get("jobs/job_1/empty.bin") == b""


def test_overwrite_replaces_the_bytes(store: ArtifactStore) -> None:
    store.put("samplers/smp_1/weights.zip", b"first version")
    blob = store.put("samplers/smp_1/weights.zip", b"second")
    assert store.get("samplers/smp_1/weights.zip") == b"second"
    assert blob.sha256 == hashlib.sha256(b"second").hexdigest() and blob.size_bytes == 6


def test_exists_and_missing_keys(store: ArtifactStore) -> None:
    assert not store.exists("jobs/job_2/particles.npy")
    with pytest.raises(KeyError):
        store.get("jobs/job_2/particles.npy")
    store.put("jobs/job_2/particles.npy", b"x")
    assert store.exists("jobs/job_2/particles.npy")
    assert not store.exists("jobs/job_2")  # a "folder" is not an artifact


def test_delete_prefix_removes_exactly_the_prefix(store: ArtifactStore) -> None:
    keys = ["jobs/job_3/particles.npy", "jobs/job_3/checkpoint.safetensors", "jobs/job_3/sub/deep.bin",
            "jobs/job_30/particles.npy", "jobs/job_3-other/particles.npy", "jobs/job_4/particles.npy",
            "datasets/ds_1/data.npz"]
    for key in keys:
        store.put(key, key.encode())
    store.delete_prefix("jobs/job_3")
    survivors = [key for key in keys if store.exists(key)]
    assert survivors == ["jobs/job_30/particles.npy", "jobs/job_3-other/particles.npy",
                         "jobs/job_4/particles.npy", "datasets/ds_1/data.npz"]
    store.delete_prefix("datasets/ds_1/data.npz")  # one artifact, named in full
    assert not store.exists("datasets/ds_1/data.npz") and store.exists("jobs/job_4/particles.npy")
    store.delete_prefix("jobs/never_there")  # nothing to delete is not an error
    store.delete_prefix("jobs/job_4/")  # a trailing slash names the same prefix
    assert not store.exists("jobs/job_4/particles.npy")


def test_delete_prefix_pages_through_large_listings(store: ArtifactStore) -> None:
    keys = [f"jobs/job_5/part-{i:04d}" for i in range(1105)]  # more than one page (1000) of a listing
    with ThreadPoolExecutor(8) as pool:  # the stores are thread-safe; this only saves wall time
        list(pool.map(lambda key: store.put(key, b""), keys))
    store.put("jobs/job_6/keep", b"keep")
    store.delete_prefix("jobs/job_5")
    assert not any(store.exists(key) for key in (keys[0], keys[999], keys[1000], keys[-1]))
    assert store.get("jobs/job_6/keep") == b"keep"


@pytest.mark.parametrize("key", ["", "/etc/passwd", "../x", "jobs/../../x", "jobs/./x", "jobs//x", "a b",
                                 "jobs/x/..", ".hidden", "jobs/\u00e9", "jobs\\x"])
def test_invalid_keys_are_refused(store: ArtifactStore, key: str) -> None:
    for operation in (lambda: store.put(key, b"x"), lambda: store.get(key), lambda: store.exists(key),
                      lambda: store.delete_prefix(key)):
        with pytest.raises(ValueError, match="invalid artifact key"):
            operation()


@pytest.mark.integration
def test_s3_objects_live_under_the_url_prefix(s3_server: S3Server, tmp_path: Path) -> None:
    bucket = s3_server.create_bucket()
    env = s3_server.service_env(bucket, prefix="parvis/prod")
    settings = Settings(data_dir=tmp_path, s3_endpoint_url=env["PARVIS_S3_ENDPOINT_URL"],
                        s3_region=env["PARVIS_S3_REGION"], s3_access_key_id=env["PARVIS_S3_ACCESS_KEY_ID"],
                        s3_secret_access_key=env["PARVIS_S3_SECRET_ACCESS_KEY"])
    store = make_store(env["PARVIS_ARTIFACTS_URL"], settings)
    store.put("jobs/job_7/particles.npy", b"abc")
    assert s3_server.keys(bucket) == ["parvis/prod/jobs/job_7/particles.npy"]
    neighbour = make_store(f"s3://{bucket}/parvis/staging", settings)
    assert not neighbour.exists("jobs/job_7/particles.npy")
    neighbour.put("jobs/job_7/particles.npy", b"other")
    store.delete_prefix("jobs")
    assert s3_server.keys(bucket) == ["parvis/staging/jobs/job_7/particles.npy"]


@pytest.mark.integration
def test_s3_errors_other_than_a_missing_key_are_not_hidden(s3_server: S3Server, tmp_path: Path) -> None:
    env = s3_server.service_env("no-such-bucket-here")
    settings = Settings(data_dir=tmp_path, s3_endpoint_url=env["PARVIS_S3_ENDPOINT_URL"],
                        s3_region=env["PARVIS_S3_REGION"], s3_access_key_id=env["PARVIS_S3_ACCESS_KEY_ID"],
                        s3_secret_access_key=env["PARVIS_S3_SECRET_ACCESS_KEY"], s3_max_attempts=1)
    store = make_store(env["PARVIS_ARTIFACTS_URL"], settings)
    from botocore.exceptions import ClientError

    with pytest.raises(ClientError, match="NoSuchBucket"):
        store.get("jobs/job_8/particles.npy")


def test_unknown_schemes_and_bucketless_urls_are_refused(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="unsupported artifacts URL scheme"):
        make_store("gs://bucket/x")
    with pytest.raises(ValueError, match="bucket"):
        make_store("s3:///prefix", Settings(data_dir=tmp_path))
    assert isinstance(make_store(f"file://{tmp_path}/a"), LocalArtifactStore)


@pytest.mark.integration
@pytest.mark.parametrize("max_attempts", [1, 4])
def test_s3_dropped_connections_are_retried(s3_server: S3Server, tmp_path: Path, max_attempts: int) -> None:
    bucket = s3_server.create_bucket()
    env = s3_server.service_env(bucket)
    proxy = DroppingProxy(int(s3_server.endpoint_url.rsplit(":", 1)[1]), drops=3)
    try:
        settings = Settings(data_dir=tmp_path, s3_endpoint_url=proxy.endpoint_url, s3_region=env["PARVIS_S3_REGION"],
                            s3_access_key_id=env["PARVIS_S3_ACCESS_KEY_ID"],
                            s3_secret_access_key=env["PARVIS_S3_SECRET_ACCESS_KEY"], s3_max_attempts=max_attempts)
        store = make_store(env["PARVIS_ARTIFACTS_URL"], settings)
        if max_attempts == 1:  # without retries the blip reaches the caller: the drops are real
            from botocore.exceptions import ConnectionClosedError

            with pytest.raises(ConnectionClosedError):
                store.put("jobs/job_9/particles.npy", b"abc")
            assert proxy.dropped >= 1
        else:
            store.put("jobs/job_9/particles.npy", b"abc")
            assert proxy.dropped == 3
            assert store.get("jobs/job_9/particles.npy") == b"abc"
            assert s3_server.keys(bucket) == ["artifacts/jobs/job_9/particles.npy"]
    finally:
        proxy.close()
