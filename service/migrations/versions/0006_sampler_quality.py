"""Sampler certificates (issue 16): the `quality` report computed when a sampler is stored.

Samplers stored before this revision have none (null).

Revision ID: 0006
Revises: 0005
Create Date: 2026-11-24
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision: str = "0006"
down_revision: str | None = "0005"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("samplers") as batch:
        batch.add_column(sa.Column("quality", sa.JSON().with_variant(postgresql.JSONB(astext_type=sa.Text()), "postgresql"), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("samplers") as batch:
        batch.drop_column("quality")
