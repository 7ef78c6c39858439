"""The 410 answer for an expired job, sampler or data set (see app/data/retention.py)."""

from __future__ import annotations

from datetime import datetime

from app.api.problems import Problem


def expired(kind: str, object_id: str, expires_at: datetime | None) -> Problem:
    when = expires_at.isoformat() if expires_at is not None else "earlier"
    return Problem(410, "expired", f"the {kind} {object_id!r} expired at {when} and is being deleted "
                   "(retention); once deleted its id is unknown (404)")
