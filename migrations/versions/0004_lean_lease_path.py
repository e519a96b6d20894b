"""a lean lease path: request ids unique per table, the state version read from the trail

An acquire repeated with the same request id is now caught by the insert itself (a unique key
on table_name, request_id) instead of a query before it. A table's state version is the id of
its newest audit event (every state change writes one, under the table's row lock), so the
`version` column, one more UPDATE per transition, goes.

Revision ID: 0004
Revises: 0003
Create Date: 2026-11-22
"""

import sqlalchemy as sa
from alembic import op

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.drop_index("ix_lakelock_commit_leases_request", table_name="lakelock_commit_leases")
    op.create_index(
        "ux_lakelock_commit_leases_request",
        "lakelock_commit_leases",
        ["table_name", "request_id"],
        unique=True,
    )
    with op.batch_alter_table("lakelock_tables") as batch:  # SQLite rebuilds the table
        batch.drop_column("version")


def downgrade() -> None:
    with op.batch_alter_table("lakelock_tables") as batch:
        batch.add_column(sa.Column("version", sa.BigInteger, nullable=False, server_default="1"))
    op.drop_index("ux_lakelock_commit_leases_request", table_name="lakelock_commit_leases")
    op.create_index(
        "ix_lakelock_commit_leases_request", "lakelock_commit_leases", ["table_name", "request_id"]
    )
