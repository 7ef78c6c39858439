"""The expiry a client asks for at creation (see service/retention.py; an expired object's 410 is
`service.errors.Expired`, raised by the repositories)."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Annotated

from fastapi import Query

from app.api.problems import Problem
from service.models import utcnow
from service.retention import expires_at_for, max_retention_for
from service.settings import Settings

RETENTION_QUERY_DESCRIPTION = ("seconds to keep it (and, for a job, its sampler) after creation; default: the "
                               "tenant's retention; at most the tenant's maximum (else 422 retention_too_long)")
#: The longest retention a request may name, whatever the tenant's maximum: about 317 years, so that creation
#: plus it stays a representable timestamp (a larger value is 422 `request_invalid`, never an overflow).
MAX_RETENTION_SECONDS = 10**10
RetentionSeconds = Annotated[int | None, Query(ge=1, le=MAX_RETENTION_SECONDS, description=RETENTION_QUERY_DESCRIPTION)]


def requested_expiry(settings: Settings, tenant: str, retention_seconds: int | None,
                     now: datetime | None = None) -> datetime | None:
    """`expires_at` for a new object: creation + `retention_seconds` when the client asks (422
    `retention_too_long` over the tenant's maximum), else the tenant's default."""
    now = now or utcnow()
    if retention_seconds is None:
        return expires_at_for(settings, tenant, now)
    limit = max_retention_for(settings, tenant)
    if limit is not None and retention_seconds > limit.total_seconds():
        raise Problem(422, "retention_too_long", f"retention_seconds {retention_seconds} is over this tenant's "
                      f"maximum of {limit.total_seconds():.0f} seconds", extra={"loc": ["query", "retention_seconds"]})
    return now + timedelta(seconds=retention_seconds)
