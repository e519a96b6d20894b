"""compaction run reports, kept per table

Revision ID: 0002
Revises: 0001
Create Date: 2026-11-21
"""

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import mysql

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None

Instant = sa.DateTime().with_variant(mysql.DATETIME(fsp=6), "mysql", "mariadb")
BigId = sa.BigInteger().with_variant(sa.Integer, "sqlite")
LongText = sa.Text().with_variant(mysql.MEDIUMTEXT(), "mysql", "mariadb")  # TEXT stops at 64 KiB


def upgrade() -> None:
    op.create_table(
        "lakelock_runs",
        sa.Column("id", BigId, primary_key=True, autoincrement=True),
        sa.Column("table_name", sa.String(255), nullable=False),
        sa.Column("reported_at", Instant, nullable=False),
        sa.Column("holder", sa.String(255)),
        sa.Column("outcome", sa.String(32), nullable=False),
        sa.Column("report", LongText, nullable=False),
    )
    op.create_index("ix_lakelock_runs_table", "lakelock_runs", ["table_name", "id"])


def downgrade() -> None:
    op.drop_table("lakelock_runs")
