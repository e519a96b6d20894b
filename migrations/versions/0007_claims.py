"""claims: a third lease kind, one compactor's hold on a table (docs/design.md §5)

`lakelock_claims` has the shape of the other lease tables, one row per grant, without their
partitions (a claim covers the whole table) and without a token (a claim fences no commit).
A table of its own, so the commit and maintenance paths never read it.

Revision ID: 0007
Revises: 0006
Create Date: 2026-11-23
"""

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import mysql

revision = "0007"
down_revision = "0006"
branch_labels = None
depends_on = None

Instant = sa.DateTime().with_variant(mysql.DATETIME(fsp=6), "mysql", "mariadb")
TABLE = "lakelock_claims"


def upgrade() -> None:
    op.create_table(
        TABLE,
        sa.Column("id", sa.String(36), primary_key=True),
        sa.Column("table_name", sa.String(255), nullable=False),
        sa.Column("holder", sa.String(255), nullable=False),
        sa.Column("request_id", sa.String(128), nullable=False),
        sa.Column("ttl_s", sa.Float, nullable=False),
        sa.Column("acquired_at", Instant, nullable=False),
        sa.Column("expires_at", Instant, nullable=False),
        sa.Column("ended_at", Instant),
        sa.Column("end", sa.String(16)),
    )
    op.create_index(f"ix_{TABLE}_live", TABLE, ["table_name", "ended_at", "expires_at"])
    op.create_index(f"ux_{TABLE}_request", TABLE, ["table_name", "request_id"], unique=True)
    op.create_index(f"ix_{TABLE}_ended", TABLE, ["ended_at", "expires_at"])


def downgrade() -> None:
    # claims live minutes; a service at the older revision knows no claim to keep
    op.drop_table(TABLE)
