"""API keys: `pvs_<prefix>_<secret>`. Only the prefix (for lookup) and the key's sha256 are stored;
comparison is constant-time. Keys belong to a tenant; every query is filtered by it."""

from __future__ import annotations

import hashlib
import hmac
import secrets

from sqlalchemy import select
from sqlalchemy.orm import Session

from app.data.jobs import new_id
from app.data.models import ApiKey

LOCAL_TENANT = "local"


def _digest(key: str) -> str:
    return hashlib.sha256(key.encode()).hexdigest()


def create_api_key(session: Session, tenant_id: str, name: str | None = None) -> str:
    """Store a new key for `tenant_id` and return it; it is shown once and cannot be recovered."""
    prefix = secrets.token_hex(6)
    key = f"pvs_{prefix}_{secrets.token_urlsafe(24)}"
    session.add(ApiKey(id=new_id("key"), tenant_id=tenant_id, prefix=prefix, key_sha256=_digest(key), name=name))
    session.commit()
    return key


def tenant_for_key(session: Session, key: str) -> str | None:
    parts = key.split("_")
    if len(parts) < 3 or parts[0] != "pvs":
        return None
    row = session.execute(select(ApiKey).where(ApiKey.prefix == parts[1])).scalar_one_or_none()
    if row is None or row.revoked_at is not None:
        return None
    return row.tenant_id if hmac.compare_digest(row.key_sha256, _digest(key)) else None
