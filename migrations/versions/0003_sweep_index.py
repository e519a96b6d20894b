"""an index for the sweeper and for pruning: commit leases by (ended_at, expires_at)

The sweeper asks, across all tables, for commit leases not yet ended whose expiry passed; the
older index starts with table_name, so that query read every lease row ever written. Pruning
(service.lock.retention) finds ended leases past the retention by the same index.

Revision ID: 0003
Revises: 0002
Create Date: 2026-11-22
"""

from alembic import op

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None


def upgrade() -> None:
    # MariaDB/MySQL build a secondary index in place, without blocking writes to the table
    op.create_index(
        "ix_lakelock_commit_leases_ended", "lakelock_commit_leases", ["ended_at", "expires_at"]
    )


def downgrade() -> None:
    op.drop_index("ix_lakelock_commit_leases_ended", table_name="lakelock_commit_leases")
