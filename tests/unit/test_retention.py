"""Retention on a real (migrated) SQLite database and a real artifact folder: who expires when, and what a
sweep deletes (rows and bytes) and keeps (active jobs, data sets active jobs use, unexpired rows)."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

import pytest
from sqlalchemy import select
from sqlalchemy.orm import Session, sessionmaker

from service.db import make_engine, make_session_factory
from service.job_state import new_id
from service.migrate import upgrade
from service.models import Artifact, DatasetRecord, Job, JobDataset, MetricPoint, Sampler, utcnow
from service.retention import expires_at_for, job_is_expired, retention_for, sweep_expired
from service.settings import Settings
from service.store import LocalArtifactStore

PAST = timedelta(minutes=-1)
FUTURE = timedelta(days=1)


@pytest.fixture
def sessions(tmp_path: Path) -> sessionmaker[Session]:
    url = f"sqlite:///{tmp_path / 'r.db'}"
    upgrade(url)
    engine = make_engine(url)
    yield make_session_factory(engine)
    engine.dispose()


@pytest.fixture
def store(tmp_path: Path) -> LocalArtifactStore:
    return LocalArtifactStore(tmp_path / "artifacts")


def add_job(session: Session, store: LocalArtifactStore, status: str, expires_in: timedelta | None,
            *, with_sampler: bool = False, datasets: tuple[str, ...] = ()) -> tuple[str, str | None]:
    now = utcnow()
    job_id = new_id("job")
    session.add(Job(id=job_id, tenant_id="t", status=status, method="svgd", name=None, spec={"steps": 10},
                    spec_sha256="0" * 64, created_at=now, updated_at=now,
                    expires_at=None if expires_in is None else now + expires_in))
    session.flush()
    blob = store.put(f"jobs/{job_id}/particles.npy", b"particles")
    session.add(Artifact(id=new_id("art"), tenant_id="t", job_id=job_id, role="particles", path=blob.key,
                         sha256=blob.sha256, size_bytes=blob.size_bytes, media_type="application/x-npy"))
    session.add(MetricPoint(job_id=job_id, tenant_id="t", step=1, wall_time_s=0.1, values={"loss": 1.0}))
    session.add_all(JobDataset(job_id=job_id, dataset_id=dataset_id) for dataset_id in datasets)
    sampler_id = None
    if with_sampler:
        sampler_id = new_id("smp")
        session.add(Sampler(id=sampler_id, tenant_id="t", job_id=job_id, method="gpvi", config={},
                            expires_at=None if expires_in is None else now + expires_in))
        session.flush()
        blob = store.put(f"samplers/{sampler_id}/sampler.zip", b"weights")
        session.add(Artifact(id=new_id("art"), tenant_id="t", sampler_id=sampler_id, role="weights",
                             path=blob.key, sha256=blob.sha256, size_bytes=blob.size_bytes,
                             media_type="application/zip"))
    session.commit()
    return job_id, sampler_id


def add_dataset(session: Session, store: LocalArtifactStore, expires_in: timedelta | None) -> str:
    dataset_id = new_id("ds")
    session.add(DatasetRecord(id=dataset_id, tenant_id="t", name=None, n_rows=2, n_features=1, y_kind="none",
                              source_media_type="application/json",
                              expires_at=None if expires_in is None else utcnow() + expires_in))
    session.flush()
    blob = store.put(f"datasets/{dataset_id}/data.npz", b"npz")
    session.add(Artifact(id=new_id("art"), tenant_id="t", dataset_id=dataset_id, role="dataset", path=blob.key,
                         sha256=blob.sha256, size_bytes=blob.size_bytes, media_type="application/x-npz"))
    session.commit()
    return dataset_id


def ids(session: Session, model: type) -> set[str]:
    return set(session.execute(select(model.id)).scalars())


def test_retention_default_per_tenant_override_and_forever() -> None:
    settings = Settings(retention_days=30, retention_days_by_tenant={"acme": 7, "keeper": 0})
    assert retention_for(settings, "someone") == timedelta(days=30)
    assert retention_for(settings, "acme") == timedelta(days=7)
    assert retention_for(settings, "keeper") is None
    now = utcnow()
    assert expires_at_for(settings, "acme", now) == now + timedelta(days=7)
    assert expires_at_for(settings, "keeper", now) is None
    assert expires_at_for(Settings(retention_days=0), "anyone", now) is None


def test_retention_by_tenant_is_read_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PARVIS_RETENTION_DAYS", "0.5")
    monkeypatch.setenv("PARVIS_RETENTION_DAYS_BY_TENANT", '{"acme": 7}')
    settings = Settings()
    assert retention_for(settings, "acme") == timedelta(days=7)
    assert retention_for(settings, "other") == timedelta(hours=12)


def test_an_active_job_never_counts_as_expired() -> None:
    past = utcnow() + PAST
    assert not job_is_expired(Job(status="running", expires_at=past))
    assert not job_is_expired(Job(status="queued", expires_at=past))
    assert job_is_expired(Job(status="succeeded", expires_at=past))
    assert not job_is_expired(Job(status="failed", expires_at=None))
    assert not job_is_expired(Job(status="cancelled", expires_at=utcnow() + FUTURE))


def test_sweep_deletes_expired_rows_and_bytes_and_keeps_the_rest(sessions, store: LocalArtifactStore) -> None:
    with sessions() as session:
        used = add_dataset(session, store, PAST)  # expired, but a running job uses it
        unused = add_dataset(session, store, PAST)
        fresh_dataset = add_dataset(session, store, FUTURE)
        forever_dataset = add_dataset(session, store, None)
        done, done_sampler = add_job(session, store, "succeeded", PAST, with_sampler=True, datasets=(unused,))
        failed, _ = add_job(session, store, "failed", PAST)
        running, _ = add_job(session, store, "running", PAST, datasets=(used,))
        queued, _ = add_job(session, store, "queued", PAST)
        fresh, fresh_sampler = add_job(session, store, "succeeded", FUTURE, with_sampler=True)
        forever, _ = add_job(session, store, "cancelled", None)

        swept = sweep_expired(session, store)

        assert set(swept.jobs) == {done, failed}
        assert swept.datasets == [unused]
        assert ids(session, Job) == {running, queued, fresh, forever}
        assert ids(session, Sampler) == {fresh_sampler}  # the expired job's sampler went with it
        assert ids(session, DatasetRecord) == {used, fresh_dataset, forever_dataset}
        remaining_jobs = set(session.execute(select(MetricPoint.job_id)).scalars())
        assert remaining_jobs == {running, queued, fresh, forever}
        artifact_owners = set(session.execute(select(Artifact.job_id)).scalars()) - {None}
        assert artifact_owners == {running, queued, fresh, forever}

    root = store.root
    for job_id in (done, failed):
        assert not (root / "jobs" / job_id).exists()
    assert not (root / "samplers" / done_sampler).exists()
    assert not (root / "datasets" / unused).exists()
    for job_id in (running, queued, fresh, forever):
        assert (root / "jobs" / job_id / "particles.npy").read_bytes() == b"particles"
    assert (root / "samplers" / fresh_sampler / "sampler.zip").exists()
    for dataset_id in (used, fresh_dataset, forever_dataset):
        assert (root / "datasets" / dataset_id / "data.npz").exists()


def test_an_expired_job_and_its_dataset_go_once_it_has_finished(sessions, store: LocalArtifactStore) -> None:
    with sessions() as session:
        dataset = add_dataset(session, store, PAST)
        running, _ = add_job(session, store, "running", PAST, datasets=(dataset,))
        assert not sweep_expired(session, store)
        session.get(Job, running).status = "succeeded"
        session.commit()
        swept = sweep_expired(session, store)
        assert (swept.jobs, swept.datasets) == ([running], [dataset])
    assert not (store.root / "jobs" / running).exists()
    assert not (store.root / "datasets" / dataset).exists()


def test_an_expired_sampler_of_a_live_job_is_swept_alone(sessions, store: LocalArtifactStore) -> None:
    with sessions() as session:
        job_id, sampler_id = add_job(session, store, "succeeded", FUTURE, with_sampler=True)
        session.get(Sampler, sampler_id).expires_at = utcnow() + PAST
        session.commit()
        swept = sweep_expired(session, store)
        assert (swept.jobs, swept.samplers) == ([], [sampler_id])
        assert ids(session, Job) == {job_id} and ids(session, Sampler) == set()
    assert not (store.root / "samplers" / sampler_id).exists()
    assert (store.root / "jobs" / job_id / "particles.npy").exists()


def test_sweep_takes_at_most_limit_per_pass_and_the_next_pass_the_rest(sessions, store: LocalArtifactStore) -> None:
    with sessions() as session:
        expired = {add_job(session, store, "succeeded", PAST)[0] for _ in range(5)}
        first = sweep_expired(session, store, limit=3)
        second = sweep_expired(session, store, limit=3)
        assert len(first.jobs) == 3 and len(second.jobs) == 2
        assert set(first.jobs) | set(second.jobs) == expired
        assert not sweep_expired(session, store, limit=3)


class RefusingStore(LocalArtifactStore):
    """A real folder store whose deletions fail while `refusing` is set (a store outage)."""

    refusing = True

    def delete_prefix(self, prefix: str) -> None:
        if self.refusing:
            raise OSError("store unavailable")
        super().delete_prefix(prefix)


def test_failed_byte_deletions_stay_recorded_until_a_later_sweep_succeeds(sessions, tmp_path: Path) -> None:
    from service.models import PendingDeletion

    store = RefusingStore(tmp_path / "refusing")
    with sessions() as session:
        job_id, sampler_id = add_job(session, store, "succeeded", PAST, with_sampler=True)
        assert sweep_expired(session, store).jobs == [job_id]
        assert job_id not in ids(session, Job)  # the row went at once
        pending = {row.prefix: row for row in session.execute(select(PendingDeletion)).scalars()}
        assert {f"jobs/{job_id}", f"samplers/{sampler_id}"} <= set(pending)
        assert all(row.attempts == 1 and "store unavailable" in row.last_error for row in pending.values())
        assert not sweep_expired(session, store)  # nothing left to expire; the bytes are retried (and fail)
        session.expire_all()
        assert {row.attempts for row in session.execute(select(PendingDeletion)).scalars()} == {2}
        assert store.exists(f"jobs/{job_id}/particles.npy")

        store.refusing = False
        sweep_expired(session, store)
        assert session.execute(select(PendingDeletion)).first() is None
        assert not store.exists(f"jobs/{job_id}/particles.npy")
        assert not store.exists(f"samplers/{sampler_id}/sampler.zip")


def test_client_retention_is_bounded_by_the_tenant_maximum() -> None:
    from app.api.problems import Problem
    from app.api.retention import requested_expiry
    from service.retention import max_retention_for

    now = utcnow()
    settings = Settings(retention_days=1, retention_days_by_tenant={"keeper": 0})
    assert max_retention_for(settings, "t") == timedelta(days=1)
    assert max_retention_for(settings, "keeper") is None  # keeps forever: any retention may be asked
    assert requested_expiry(settings, "t", None, now) == now + timedelta(days=1)
    assert requested_expiry(settings, "t", 60, now) == now + timedelta(seconds=60)
    assert requested_expiry(settings, "keeper", 10**8, now) == now + timedelta(seconds=10**8)
    with pytest.raises(Problem) as refused:
        requested_expiry(settings, "t", 86_401, now)
    assert refused.value.status == 422 and refused.value.code == "retention_too_long"
    longer = Settings(retention_days=1, max_retention_days=7)
    assert requested_expiry(longer, "t", 7 * 86_400, now) == now + timedelta(days=7)
