"""readers: holds of jobs streaming out of a table, which snapshot expiry keeps back

One row per (table, reader) while its hold is live: its position (a snapshot id), its TTL and
expiry. The sweep deletes a row past its expiry, with a `reader.expired` event.

Revision ID: 0010
Revises: 0009
Create Date: 2026-11-25
"""

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import mysql

revision = "0010"
down_revision = "0009"
branch_labels = None
depends_on = None

Instant = sa.DateTime().with_variant(mysql.DATETIME(fsp=6), "mysql", "mariadb")


def upgrade() -> None:
    op.create_table(
        "lakelock_readers",
        sa.Column("table_name", sa.String(255), primary_key=True),
        sa.Column("reader", sa.String(128), primary_key=True),
        sa.Column("snapshot_id", sa.BigInteger, nullable=False),
        sa.Column("snapshots_behind", sa.BigInteger),
        sa.Column("ttl_s", sa.Float, nullable=False),
        sa.Column("expires_at", Instant, nullable=False),
        sa.Column("held_since", Instant, nullable=False),
        sa.Column("advanced_at", Instant, nullable=False),
        sa.Column("holder", sa.String(255)),
    )
    op.create_index("ix_lakelock_readers_expiry", "lakelock_readers", ["expires_at"])


def downgrade() -> None:
    # a live reader puts its hold again within a third of its TTL
    op.drop_index("ix_lakelock_readers_expiry", table_name="lakelock_readers")
    op.drop_table("lakelock_readers")
