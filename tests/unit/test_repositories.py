"""The tenant-scoped repositories (service/repositories) on a real SQLite database and filesystem store: every
lookup is the tenant's own, refusals are domain errors with stable codes, and app/api/problems.py maps each
domain error to one HTTP status."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

import numpy as np
import pytest

from app.api.problems import domain_problem
from inference_core.datasets import Dataset
from inference_core.spec import admit
from service.db import make_engine, make_session_factory
from service.errors import Conflict, DomainError, Expired, NotFound, QuotaExceeded, Rejected, Unavailable
from service.migrate import upgrade
from service.models import Job, utcnow
from service.repositories import Datasets, Jobs, Samplers
from service.store import make_store

GAUSSIAN = {"method": "svgd", "steps": 5, "target": {"kind": "gaussian", "mean": [0.0], "cov": [[1.0]]}}


@pytest.fixture
def sessions(tmp_path: Path):  # noqa: ANN201
    url = f"sqlite:///{tmp_path / 'db.sqlite'}"
    upgrade(url)
    return make_session_factory(make_engine(url))


@pytest.fixture
def store(tmp_path: Path):  # noqa: ANN201
    return make_store(f"file://{tmp_path / 'artifacts'}")


def submit(session, tenant: str, spec: dict = GAUSSIAN, key: str | None = None, max_active: int = 10,  # noqa: ANN001
           enqueue=lambda job_id: None):  # noqa: ANN001
    return Jobs(session, tenant).submit(admit(spec), idempotency_key=key, expires_at=None, max_active=max_active,
                                        max_attempts=3, enqueue=enqueue)


def test_another_tenants_job_is_as_missing_as_an_unknown_one(sessions) -> None:
    with sessions() as session:
        job = submit(session, "alice").job
    with sessions() as session:
        assert Jobs(session, "alice").owned(job.id).id == job.id
        for job_id in (job.id, "job_unknown"):
            with pytest.raises(NotFound, match="no job with id") as caught:
                Jobs(session, "bob").owned(job_id)
            assert caught.value.code == "not_found"
        assert Jobs(session, "bob").page(10).items == []
        assert [j.id for j in Jobs(session, "alice").page(10).items] == [job.id]
        with pytest.raises(NotFound):
            Jobs(session, "bob").cancel(job.id)


def test_submit_replays_a_key_refuses_a_reused_one_and_keeps_the_quota(sessions) -> None:
    with sessions() as session:
        first = submit(session, "alice", key="k1")
        again = submit(session, "alice", key="k1")
        assert not first.replayed and again.replayed and again.job.id == first.job.id
        with pytest.raises(Rejected) as caught:
            submit(session, "alice", {**GAUSSIAN, "steps": 6}, key="k1")
        assert caught.value.code == "idempotency_key_reused"
        assert not submit(session, "bob", key="k1").replayed  # keys are per tenant
        with pytest.raises(QuotaExceeded) as quota:
            submit(session, "alice", max_active=1)
        assert quota.value.retry_after_s == 30


def test_a_broker_failure_stores_nothing(sessions) -> None:
    def broken(job_id: str) -> None:
        raise ConnectionError("broker down")

    with sessions() as session:
        with pytest.raises(Unavailable) as caught:
            submit(session, "alice", enqueue=broken)
        assert caught.value.code == "broker_unavailable" and caught.value.retry_after_s == 5
    with sessions() as session:
        assert session.query(Job).count() == 0


def test_cancel_and_delete_follow_the_job_state(sessions, store) -> None:
    with sessions() as session:
        job = submit(session, "alice").job
        with pytest.raises(Conflict) as running:
            Jobs(session, "alice").delete(job.id, store)
        assert running.value.code == "job_not_finished"
        assert Jobs(session, "alice").cancel(job.id).status == "cancelled"  # queued: cancelled at once
        Jobs(session, "alice").delete(job.id, store)
        with pytest.raises(NotFound):
            Jobs(session, "alice").owned(job.id)


def test_an_expired_finished_job_is_gone_for_its_tenant(sessions) -> None:
    with sessions() as session:
        job = submit(session, "alice").job
        row = session.get(Job, job.id)
        row.status, row.expires_at = "succeeded", utcnow() - timedelta(seconds=1)
        session.commit()
        with pytest.raises(Expired) as caught:
            Jobs(session, "alice").owned(job.id)
        assert caught.value.code == "expired"


def test_datasets_answer_the_shape_checks_for_their_tenant_only(sessions, store) -> None:
    rng = np.random.default_rng(0)
    data = Dataset(X=rng.normal(size=(12, 3)), y=rng.normal(size=12), name="t")
    with sessions() as session:
        record, _ = Datasets(session, "alice").save(store, data, name="t", source_media_type="application/json")
        shape = Datasets(session, "alice").shapes([record.id])[record.id]
        assert (shape.n_rows, shape.n_features, shape.has_y, shape.n_classes) == (12, 3, True, None)
        with pytest.raises(Rejected) as caught:
            Datasets(session, "bob").shapes([record.id])
        assert caught.value.code == "dataset_unknown" and caught.value.loc == ("target", "dataset")
        assert Datasets(session, "bob").path(record.id) is None
        record.expires_at = utcnow() - timedelta(seconds=1)
        session.commit()
        with pytest.raises(Rejected, match="expired"):
            Datasets(session, "alice").shapes([record.id])
        assert Datasets(session, "alice").shapes([record.id], live_only=False)[record.id] == shape
        with pytest.raises(NotFound):
            Samplers(session, "alice").owned("smp_unknown")


def test_each_domain_error_maps_to_one_status() -> None:
    expected = {NotFound: 404, Expired: 410, Conflict: 409, Rejected: 422, QuotaExceeded: 429, Unavailable: 503}
    for kind, status in expected.items():
        problem = domain_problem(kind("why", code="some_code", loc=("target",), retry_after_s=7))
        assert (problem.status, problem.code, problem.detail) == (status, "some_code", "why")
        assert problem.headers == {"Retry-After": "7"} and problem.extra == {"loc": ["target"]}
    assert domain_problem(DomainError("plain")).status == 422
