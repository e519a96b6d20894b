"""debt: the latest compaction debt a compactor reported for each table

One row per table in `lakelock_debt`, apart from `lakelock_tables`, whose row every lease call
locks and reads: a report neither widens that row nor waits for lease calls to read it.

Revision ID: 0008
Revises: 0007
Create Date: 2026-11-23
"""

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import mysql

revision = "0008"
down_revision = "0007"
branch_labels = None
depends_on = None

Instant = sa.DateTime().with_variant(mysql.DATETIME(fsp=6), "mysql", "mariadb")


def upgrade() -> None:
    op.create_table(
        "lakelock_debt",
        sa.Column("table_name", sa.String(255), primary_key=True),
        sa.Column("snapshot_id", sa.BigInteger),
        sa.Column("data_files", sa.BigInteger, nullable=False),
        sa.Column("small_files", sa.BigInteger, nullable=False),
        sa.Column("delete_files", sa.BigInteger, nullable=False),
        sa.Column("partitions_over_target", sa.BigInteger, nullable=False),
        sa.Column("records", sa.BigInteger),
        sa.Column("measured_at", sa.String(64)),
        sa.Column("reported_at", Instant, nullable=False),
        sa.Column("reported_by", sa.String(255)),
    )


def downgrade() -> None:
    # the next report of each table measures it again
    op.drop_table("lakelock_debt")
