"""Retention (issue 15): `expires_at` on jobs, samplers and datasets, indexed for the sweeper.

Rows that exist before this revision get no expiry (null: kept until deleted by hand).

Revision ID: 0004
Revises: 0003
Create Date: 2026-11-24
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0004"
down_revision: str | None = "0003"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

TABLES = ("jobs", "samplers", "datasets")


def upgrade() -> None:
    for table in TABLES:
        with op.batch_alter_table(table) as batch:
            batch.add_column(sa.Column("expires_at", sa.DateTime(timezone=True), nullable=True))
            batch.create_index(f"ix_{table}_expires_at", ["expires_at"], unique=False)


def downgrade() -> None:
    for table in TABLES:
        with op.batch_alter_table(table) as batch:
            batch.drop_index(f"ix_{table}_expires_at")
            batch.drop_column("expires_at")
