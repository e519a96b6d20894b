"""follower owners: a follower row is the token's own (principal, holder), with its scope

`lakelock_followers` was keyed by `holder` alone, so one job token's long-poll replaced
another's row under the same holder name (silencing the due alert of the tables the other
follows). Rows are now keyed by (principal, holder) and carry `scope`, the token's table
patterns (LAKELOCK_TOKEN_TABLES; NULL: every table), so that a narrowed token following `*`
follows only its own tables (docs/design.md §5.1). The rows are a window of the last polls: they
are dropped, and each follower records itself again at its next poll.

Revision ID: 0015
Revises: 0014
Create Date: 2026-11-28
"""

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import mysql

revision = "0015"
down_revision = "0014"
branch_labels = None
depends_on = None

Instant = sa.DateTime().with_variant(mysql.DATETIME(fsp=6), "mysql", "mariadb")
LongText = sa.Text().with_variant(mysql.MEDIUMTEXT(), "mysql", "mariadb")


def upgrade() -> None:
    op.drop_table("lakelock_followers")
    op.create_table(
        "lakelock_followers",
        sa.Column("principal", sa.String(255), primary_key=True),
        sa.Column("holder", sa.String(255), primary_key=True),
        sa.Column("tables", LongText, nullable=False),
        sa.Column("scope", LongText),
        sa.Column("polled_at", Instant, nullable=False),
        sa.Column("parked_until", Instant),
    )


def downgrade() -> None:
    op.drop_table("lakelock_followers")
    op.create_table(
        "lakelock_followers",
        sa.Column("holder", sa.String(255), primary_key=True),
        sa.Column("principal", sa.String(255)),
        sa.Column("tables", LongText, nullable=False),
        sa.Column("polled_at", Instant, nullable=False),
        sa.Column("parked_until", Instant),
    )
