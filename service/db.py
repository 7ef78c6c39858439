"""Engine and session factories (built explicitly, never at import time)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from sqlalchemy import Engine, create_engine, event, make_url
from sqlalchemy.orm import Session, sessionmaker
from sqlalchemy.pool import QueuePool


def make_engine(url: str, **kwargs: Any) -> Engine:
    if url.startswith("sqlite"):
        database = make_url(url).database
        if database and database != ":memory:":
            Path(database).parent.mkdir(parents=True, exist_ok=True)
        pooling = {"pool_size": 15, "max_overflow": 10} if database and database != ":memory:" else {}
        engine = create_engine(url, connect_args={"check_same_thread": False, "timeout": 30}, **pooling, **kwargs)

        @event.listens_for(engine, "connect")
        def _sqlite_pragmas(dbapi_connection: Any, _record: Any) -> None:
            # WAL lets the API read while the worker writes; busy_timeout rides out short write locks.
            cursor = dbapi_connection.cursor()
            cursor.execute("PRAGMA foreign_keys=ON")
            cursor.execute("PRAGMA journal_mode=WAL")
            cursor.execute("PRAGMA busy_timeout=30000")
            cursor.execute("PRAGMA synchronous=NORMAL")
            cursor.close()

        return engine
    # A bounded connect: a database that drops packets (rather than refusing) is an outage after 5 s, not after
    # the operating system's TCP timeout (minutes), for the API's 503s and the worker's outage buffering alike.
    connect_args = {"connect_timeout": CONNECT_TIMEOUT_S} if make_url(url).get_backend_name() == "postgresql" else {}
    return create_engine(url, pool_pre_ping=True, pool_size=10, max_overflow=10, connect_args=connect_args, **kwargs)


CONNECT_TIMEOUT_S = 5


def pool_capacity(engine: Engine) -> int:
    """Connections the engine's pool keeps open (a QueuePool's size). Request sessions are gated to this many:
    an overflow connection is opened for one use and closed after it, which under load costs a PostgreSQL
    backend start per request; the overflow is left to the short un-gated sessions (key lookups, stream
    snapshots)."""
    pool = engine.pool
    if isinstance(pool, QueuePool):
        return max(1, pool.size())
    return 16


def make_session_factory(engine: Engine) -> sessionmaker[Session]:
    return sessionmaker(bind=engine, expire_on_commit=False)


@contextmanager
def session_scope(factory: sessionmaker[Session]) -> Iterator[Session]:
    """A session committed on success and rolled back on error."""
    session = factory()
    try:
        yield session
        session.commit()
    except BaseException:
        session.rollback()
        raise
    finally:
        session.close()
