"""API keys: `pvs_<prefix>_<secret>`. Only the prefix (for lookup) and the key's sha256 are stored;
comparison is constant-time. Keys belong to a tenant; every query is filtered by it."""

from __future__ import annotations

import hashlib
import hmac
import secrets
from collections.abc import Callable

from sqlalchemy import select
from sqlalchemy.orm import Session

from service.job_state import new_id
from service.models import ApiKey, utcnow

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


def list_api_keys(session: Session, tenant_id: str | None = None) -> list[ApiKey]:
    """Keys (revoked ones too), oldest first; all tenants' unless `tenant_id` is given."""
    query = select(ApiKey).order_by(ApiKey.created_at, ApiKey.id)
    if tenant_id is not None:
        query = query.where(ApiKey.tenant_id == tenant_id)
    return list(session.execute(query).scalars())


def revoke_api_key(session: Session, id_or_prefix: str) -> tuple[ApiKey | None, bool]:
    """Revoke the key with this id or prefix (or the whole key itself); it is refused from its next request
    on, since every request looks its key up. Returns (the key or None, whether this call revoked it):
    revoking twice keeps the first date."""
    parts = id_or_prefix.split("_")
    prefix = parts[1] if len(parts) >= 3 and parts[0] == "pvs" else id_or_prefix
    row = session.execute(select(ApiKey).where((ApiKey.id == id_or_prefix) | (ApiKey.prefix == prefix))
                          ).scalars().first()
    if row is None or row.revoked_at is not None:
        return row, False
    row.revoked_at = utcnow()
    session.commit()
    return row, True


def tenant_for_key(session: Session, key: str) -> str | None:
    parts = key.split("_")
    if len(parts) < 3 or parts[0] != "pvs":
        return None
    row = session.execute(select(ApiKey).where(ApiKey.prefix == parts[1])).scalar_one_or_none()
    if row is None or row.revoked_at is not None:
        return None
    return row.tenant_id if hmac.compare_digest(row.key_sha256, _digest(key)) else None


def bearer_key(authorization: str) -> str | None:
    """The key of an `Authorization: Bearer <key>` header value, or None."""
    scheme, _, key = authorization.partition(" ")
    key = key.strip()
    return key if scheme.lower() == "bearer" and key else None


def tenant_for_bearer(session_factory: Callable[[], Session], authorization: str) -> str | None:
    """The tenant of a Bearer header's key, looked up on a short session of its own (no cache, so a revoked
    key is refused at its next request); None for a missing, unknown or revoked key."""
    key = bearer_key(authorization)
    if key is None:
        return None
    with session_factory() as session:
        return tenant_for_key(session, key)
