"""What the repositories refuse with: domain errors carrying a stable `code` and a client-facing `detail`. They
know nothing of HTTP; app/api/problems.py maps each class to its status and a problem+json body, in one table."""

from __future__ import annotations

from datetime import datetime


class DomainError(Exception):
    code = "request_invalid"

    def __init__(self, detail: str, *, code: str | None = None, loc: tuple[str, ...] = (),
                 retry_after_s: int | None = None):
        super().__init__(detail)
        self.detail = detail
        self.code = code or type(self).code
        self.loc = loc
        self.retry_after_s = retry_after_s


class NotFound(DomainError):
    """Missing, or another tenant's (the two are indistinguishable)."""

    code = "not_found"

    @classmethod
    def of(cls, kind: str, object_id: str) -> NotFound:
        return cls(f"no {kind} with id {object_id!r}")


class Expired(DomainError):
    """Past its retention and waiting for the sweeper; once swept its id is unknown (NotFound)."""

    code = "expired"

    @classmethod
    def of(cls, kind: str, object_id: str, expires_at: datetime | None) -> Expired:
        when = expires_at.isoformat() if expires_at is not None else "earlier"
        return cls(f"the {kind} {object_id!r} expired at {when} and is being deleted (retention); once deleted "
                   "its id is unknown (404)")


class Conflict(DomainError):
    """Not possible in the object's present state (a running job, a data set in use)."""

    code = "conflict"


class Rejected(DomainError):
    """The request names something unusable (an unknown or expired data set, a reused idempotency key)."""


class QuotaExceeded(DomainError):
    code = "quota_exceeded"


class Unavailable(DomainError):
    """A neighbour (the broker) is unreachable: nothing was stored, retry later."""

    code = "unavailable"
