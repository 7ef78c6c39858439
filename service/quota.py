"""Per-tenant serialisation of "count the active jobs, then insert one", so a cap cannot be overrun.

Counting and inserting in one ordinary transaction is a race: under READ COMMITTED (PostgreSQL) or SQLite's
deferred transactions, 30 concurrent submits all count the same few jobs and all insert (issue 15 saw 14
accepted on PostgreSQL and 12 on SQLite with a cap of 5). `lock_tenant_jobs` makes concurrent submits of
one tenant take turns until their transaction ends (commit or rollback), with no schema change:

* PostgreSQL: a transaction-scoped advisory lock keyed on the tenant (`pg_advisory_xact_lock`); other
  tenants are not blocked, and each count runs after the previous holder's insert is committed.
* SQLite: the database's write lock, taken up front with `BEGIN IMMEDIATE` (pysqlite would only take it at
  the INSERT, after the count). SQLite has one writer at a time anyway, so this serialises every writer for
  the few milliseconds of a submit; busy_timeout (service.db) makes the others wait, not fail.
"""

from __future__ import annotations

from sqlalchemy import text
from sqlalchemy.orm import Session

QUOTA_LOCK_NAMESPACE = "parvis.active_jobs"


def lock_tenant_jobs(session: Session, tenant: str) -> None:
    """Hold, until this session's transaction ends, the lock that serialises the tenant's job submits.

    Call before counting the tenant's active jobs and commit (or roll back) right after inserting.
    """
    connection = session.connection()
    dialect = connection.dialect.name
    if dialect == "postgresql":
        connection.execute(text("SELECT pg_advisory_xact_lock(hashtext(:key))"),
                           {"key": f"{QUOTA_LOCK_NAMESPACE}:{tenant}"})
    elif dialect == "sqlite":
        # pysqlite's default transaction control (which service.db keeps) begins a transaction only before
        # a write: reads so far ran outside one. If one is open, a write is pending and this connection
        # holds the write lock already: nothing more to take.
        if not connection.connection.driver_connection.in_transaction:
            connection.exec_driver_sql("BEGIN IMMEDIATE")
    else:
        raise NotImplementedError(f"no job quota lock for database dialect {dialect!r}")
