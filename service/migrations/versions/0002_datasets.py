"""Uploaded data sets, which jobs use them, and data set artifacts.

Revision ID: 0002
Revises: 0001
Create Date: 2026-11-21
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0002"
down_revision: str | None = "0001"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "datasets",
        sa.Column("id", sa.String(length=40), nullable=False),
        sa.Column("tenant_id", sa.String(length=64), nullable=False),
        sa.Column("name", sa.String(length=200), nullable=True),
        sa.Column("n_rows", sa.Integer(), nullable=False),
        sa.Column("n_features", sa.Integer(), nullable=False),
        sa.Column("n_test_rows", sa.Integer(), nullable=False),
        sa.Column("y_kind", sa.String(length=16), nullable=False),
        sa.Column("n_classes", sa.Integer(), nullable=True),
        sa.Column("source_media_type", sa.String(length=100), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_datasets")),
    )
    with op.batch_alter_table("datasets", schema=None) as batch_op:
        batch_op.create_index("ix_datasets_tenant_created", ["tenant_id", "created_at", "id"], unique=False)

    op.create_table(
        "job_datasets",
        sa.Column("job_id", sa.String(length=40), nullable=False),
        sa.Column("dataset_id", sa.String(length=40), nullable=False),
        sa.ForeignKeyConstraint(
            ["dataset_id"],
            ["datasets.id"],
            name=op.f("fk_job_datasets_dataset_id_datasets"),
            ondelete="CASCADE",
        ),
        sa.ForeignKeyConstraint(
            ["job_id"], ["jobs.id"], name=op.f("fk_job_datasets_job_id_jobs"), ondelete="CASCADE"
        ),
        sa.PrimaryKeyConstraint("job_id", "dataset_id", name=op.f("pk_job_datasets")),
    )
    with op.batch_alter_table("job_datasets", schema=None) as batch_op:
        batch_op.create_index("ix_job_datasets_dataset", ["dataset_id"], unique=False)

    with op.batch_alter_table("artifacts", schema=None) as batch_op:
        batch_op.add_column(sa.Column("dataset_id", sa.String(length=40), nullable=True))
        batch_op.create_index("ix_artifacts_dataset", ["dataset_id"], unique=False)
        batch_op.create_foreign_key(
            batch_op.f("fk_artifacts_dataset_id_datasets"),
            "datasets",
            ["dataset_id"],
            ["id"],
            ondelete="CASCADE",
        )


def downgrade() -> None:
    with op.batch_alter_table("artifacts", schema=None) as batch_op:
        batch_op.drop_constraint(batch_op.f("fk_artifacts_dataset_id_datasets"), type_="foreignkey")
        batch_op.drop_index("ix_artifacts_dataset")
        batch_op.drop_column("dataset_id")

    with op.batch_alter_table("job_datasets", schema=None) as batch_op:
        batch_op.drop_index("ix_job_datasets_dataset")

    op.drop_table("job_datasets")
    with op.batch_alter_table("datasets", schema=None) as batch_op:
        batch_op.drop_index("ix_datasets_tenant_created")

    op.drop_table("datasets")
