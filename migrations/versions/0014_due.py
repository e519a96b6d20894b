"""due: the files each partition gained since it was last compacted, as commits land

`lakelock_due`: one row per (table, partition) with files counted since the partition's last
compaction: data and delete files added, the commits that added them, when the first of those
landed, and `due_at`, when the counts reached the due threshold (null before). A compaction
deletes the row. `lakelock_due_samples`: the time from due to compacted of each compacted
partition that was due, for the figures of the last hour. `lakelock_followers`: the compactors
that long-poll for due partitions, and until when each is parked (docs/design.md §5.1).

Revision ID: 0014
Revises: 0013
Create Date: 2026-11-27
"""

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import mysql

revision = "0014"
down_revision = "0013"
branch_labels = None
depends_on = None

Instant = sa.DateTime().with_variant(mysql.DATETIME(fsp=6), "mysql", "mariadb")
LongText = sa.Text().with_variant(mysql.MEDIUMTEXT(), "mysql", "mariadb")
BigId = sa.BigInteger().with_variant(sa.Integer, "sqlite")


def upgrade() -> None:
    op.create_table(
        "lakelock_due",
        sa.Column("table_name", sa.String(255), primary_key=True),
        sa.Column("partition_name", sa.String(512), primary_key=True),
        sa.Column("data_files", sa.BigInteger, nullable=False),
        sa.Column("delete_files", sa.BigInteger, nullable=False),
        sa.Column("commits", sa.BigInteger, nullable=False),
        sa.Column("first_at", Instant, nullable=False),
        sa.Column("due_at", Instant),
        sa.Column("updated_at", Instant, nullable=False),
    )
    op.create_index("ix_lakelock_due_due_at", "lakelock_due", ["due_at"])
    op.create_table(
        "lakelock_due_samples",
        sa.Column("id", BigId, primary_key=True, autoincrement=True),
        sa.Column("table_name", sa.String(255), nullable=False),
        sa.Column("partition_name", sa.String(512), nullable=False),
        sa.Column("due_at", Instant, nullable=False),
        sa.Column("compacted_at", Instant, nullable=False),
        sa.Column("seconds", sa.Float, nullable=False),
    )
    op.create_index(
        "ix_lakelock_due_samples_table", "lakelock_due_samples", ["table_name", "compacted_at"]
    )
    op.create_index("ix_lakelock_due_samples_at", "lakelock_due_samples", ["compacted_at"])
    op.create_table(
        "lakelock_followers",
        sa.Column("holder", sa.String(255), primary_key=True),
        sa.Column("principal", sa.String(255)),
        sa.Column("tables", LongText, nullable=False),
        sa.Column("polled_at", Instant, nullable=False),
        sa.Column("parked_until", Instant),
    )


def downgrade() -> None:
    # counts start again from the next commits; the compactors' debt reports correct them
    op.drop_table("lakelock_followers")
    op.drop_index("ix_lakelock_due_samples_at", table_name="lakelock_due_samples")
    op.drop_index("ix_lakelock_due_samples_table", table_name="lakelock_due_samples")
    op.drop_table("lakelock_due_samples")
    op.drop_index("ix_lakelock_due_due_at", table_name="lakelock_due")
    op.drop_table("lakelock_due")
