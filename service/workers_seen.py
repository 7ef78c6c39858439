"""How many workers are alive, from their heartbeats (the API's readiness check)."""

from __future__ import annotations

from datetime import timedelta

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from service.models import WorkerHeartbeat, utcnow


def live_workers(session: Session, heartbeat_seconds: float) -> int:
    """Workers whose last heartbeat is recent (three heartbeats, at least 10 s); raises when the database is
    unreachable."""
    cutoff = utcnow() - timedelta(seconds=max(3 * heartbeat_seconds, 10.0))
    return int(session.execute(select(func.count()).select_from(WorkerHeartbeat)
                               .where(WorkerHeartbeat.last_seen_at > cutoff)).scalar_one())
