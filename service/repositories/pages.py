"""Keyset pagination, newest first: (created_at, id) of the last row seen is where the next page starts."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any, Generic, TypeVar

from sqlalchemy import Select, and_, or_
from sqlalchemy.orm import Session

T = TypeVar("T")
Cursor = tuple[datetime, str]


@dataclass(frozen=True)
class Page(Generic[T]):
    items: list[T]
    more: bool


def newest_first(session: Session, query: Select, model: Any, size: int, after: Cursor | None) -> Page:
    """At most `size` rows of `query` ordered by (created_at, id) descending, after the cursor; `more` when
    another page follows. A query of one entity yields the entities, else rows."""
    if after is not None:
        created, last_id = after
        query = query.where(or_(model.created_at < created, and_(model.created_at == created, model.id < last_id)))
    result = session.execute(query.order_by(model.created_at.desc(), model.id.desc()).limit(size + 1))
    rows = list(result.scalars() if len(query.column_descriptions) == 1 else result.all())
    return Page(rows[:size], len(rows) > size)
