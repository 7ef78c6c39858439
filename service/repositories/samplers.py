"""`Samplers(session, tenant)`: a tenant's trained samplers — find, page, their artifacts, their job's target,
delete."""

from __future__ import annotations

from typing import Any

from sqlalchemy import delete, select
from sqlalchemy.orm import Session

from service.errors import Expired, NotFound
from service.models import Artifact, Job, Sampler, utcnow
from service.repositories.pages import Cursor, Page, newest_first
from service.retention import delete_bytes, is_expired, not_expired
from service.store import ArtifactStore


class Samplers:
    def __init__(self, session: Session, tenant: str):
        self.session = session
        self.tenant = tenant

    def owned(self, sampler_id: str) -> Sampler:
        sampler = self.session.execute(select(Sampler).where(
            Sampler.id == sampler_id, Sampler.tenant_id == self.tenant)).scalar_one_or_none()
        if sampler is None:
            raise NotFound.of("sampler", sampler_id)
        if is_expired(sampler.expires_at):
            raise Expired.of("sampler", sampler_id, sampler.expires_at)
        return sampler

    def of_job(self, job: Job) -> Sampler | None:
        """The sampler a job (already found through `Jobs.owned`) stored, if any."""
        return self.session.execute(select(Sampler).where(
            Sampler.job_id == job.id, Sampler.tenant_id == self.tenant)).scalar_one_or_none()

    def artifacts(self, sampler: Sampler) -> dict[str, Artifact]:
        """A found sampler's artifacts by role (`weights`, `onnx`)."""
        rows = self.session.execute(select(Artifact).where(Artifact.sampler_id == sampler.id,
                                                           Artifact.tenant_id == self.tenant)).scalars()
        return {artifact.role: artifact for artifact in rows}

    def job_target(self, sampler: Sampler) -> dict[str, Any] | None:
        """The target spec of the job that trained the sampler (what its log weights are taken against)."""
        spec = self.session.execute(select(Job.spec).where(
            Job.id == sampler.job_id, Job.tenant_id == self.tenant)).scalar_one_or_none() or {}
        target = spec.get("target")
        return target if isinstance(target, dict) else None

    def page(self, size: int, after: Cursor | None = None) -> Page[Sampler]:
        query = select(Sampler).where(Sampler.tenant_id == self.tenant, not_expired(Sampler.expires_at, utcnow()))
        return newest_first(self.session, query, Sampler, size, after)

    def delete(self, sampler_id: str, store: ArtifactStore) -> list[Artifact]:
        """Deletes the sampler and its bytes (a failed deletion is retried by the sweeper); returns the artifacts
        it had, so caches keyed by their sha256 can drop them."""
        sampler = self.owned(sampler_id)
        artifacts = list(self.artifacts(sampler).values())
        self.session.execute(delete(Sampler).where(Sampler.id == sampler.id, Sampler.tenant_id == self.tenant))
        delete_bytes(self.session, store, [*(a.path for a in artifacts), f"samplers/{sampler.id}"])  # commits
        return artifacts
