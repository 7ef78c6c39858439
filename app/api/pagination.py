"""Opaque, tamper-evident page tokens for keyset pagination (newest first), per AIP-158."""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
from datetime import datetime
from typing import Annotated, Any

from fastapi import Query

from app.api.problems import Problem

#: The largest integer a query parameter carries towards SQL: 2**53, exact as a JSON number and far inside the
#: 64-bit integers of SQLite and PostgreSQL, so an over-large value is a 422 `request_invalid`, never a database
#: overflow (issue 43: `since_step=1e30` was a 500). Stated in the OpenAPI document as `maximum`.
QUERY_INT_MAX = 2**53

PageSize = Annotated[int | None, Query(ge=1, le=QUERY_INT_MAX, description="items per page (default "
                                       "PARVIS_DEFAULT_PAGE_SIZE; a larger value is cut to PARVIS_MAX_PAGE_SIZE)")]
PageToken = Annotated[str | None, Query(description="`next_page_token` of the previous page")]


def clamp_page_size(requested: int | None, default: int, maximum: int) -> int:
    if requested is None:
        return default
    if requested < 1:
        raise Problem(422, "request_invalid", "page_size must be at least 1")
    return min(requested, maximum)


def encode_token(secret: str, created_at: datetime, object_id: str, filters: dict[str, Any]) -> str:
    payload = json.dumps({"c": created_at.isoformat(), "i": object_id, "f": filters}, sort_keys=True).encode()
    mac = hmac.new(secret.encode(), payload, hashlib.sha256).digest()[:16]
    return base64.urlsafe_b64encode(payload).decode().rstrip("=") + "." + base64.urlsafe_b64encode(mac).decode().rstrip("=")


def decode_token(secret: str, token: str, filters: dict[str, Any]) -> tuple[datetime, str]:
    """The (created_at, id) to continue after; 422 if the token was altered or the filters changed."""
    try:
        body, _, mac = token.partition(".")
        payload = base64.urlsafe_b64decode(body + "=" * (-len(body) % 4))
        given = base64.urlsafe_b64decode(mac + "=" * (-len(mac) % 4))
        expected = hmac.new(secret.encode(), payload, hashlib.sha256).digest()[:16]
        if not hmac.compare_digest(given, expected):
            raise ValueError("bad signature")
        data = json.loads(payload)
        if data["f"] != filters:
            raise Problem(422, "page_token_invalid", "page_token was issued for different filters")
        return datetime.fromisoformat(data["c"]), str(data["i"])
    except Problem:
        raise
    except Exception:  # noqa: BLE001 - any malformed token is the same client error
        raise Problem(422, "page_token_invalid", "page_token is not valid") from None


def cursor_of(secret: str, token: str | None, filters: dict[str, Any]) -> tuple[datetime, str] | None:
    """Where a page token says to continue (None: the first page)."""
    return decode_token(secret, token, filters) if token else None


def next_token(secret: str, page: Any, filters: dict[str, Any]) -> str | None:
    """The token of the page after a repository `Page` (None: it was the last), from its last row's
    (created_at, id); a row may be a tuple whose first entry is the object."""
    if not page.more:
        return None
    last = page.items[-1]
    last = last[0] if isinstance(last, tuple) or hasattr(last, "_fields") else last
    return encode_token(secret, last.created_at, last.id, filters)
