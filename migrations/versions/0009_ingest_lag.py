"""ingest lag: the latest source lag an ingest query reported for each table

One row per table in `lakelock_ingest_lag`, as `lakelock_debt`: per topic-partition the records
the query is behind (JSON), their sum, and who reported it when.

Revision ID: 0009
Revises: 0008
Create Date: 2026-11-25
"""

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import mysql

revision = "0009"
down_revision = "0008"
branch_labels = None
depends_on = None

Instant = sa.DateTime().with_variant(mysql.DATETIME(fsp=6), "mysql", "mariadb")
LongText = sa.Text().with_variant(mysql.MEDIUMTEXT(), "mysql", "mariadb")


def upgrade() -> None:
    op.create_table(
        "lakelock_ingest_lag",
        sa.Column("table_name", sa.String(255), primary_key=True),
        sa.Column("query_id", sa.String(128), nullable=False),
        sa.Column("batch_id", sa.BigInteger, nullable=False),
        sa.Column("partitions", LongText, nullable=False),
        sa.Column("records", sa.BigInteger, nullable=False),
        sa.Column("reported_at", Instant, nullable=False),
        sa.Column("reported_by", sa.String(255)),
    )


def downgrade() -> None:
    # the next batch of each ingest query reports its lag again
    op.drop_table("lakelock_ingest_lag")
