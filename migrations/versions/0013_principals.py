"""principals: every lease, claim and intent belongs to the token that took it

`principal` is the name of the bearer token (LAKELOCK_TOKENS) that took a commit lease, a
maintenance lease, a claim or an intent; only that token renews, releases, withdraws or commits
under it, and an operator may end any (docs/design.md §6). Rows granted before this revision
have none (NULL): no job token may act on them, only an operator may end them. `renewals` counts
a lease's successful renewals (its end event carries the count).

Revision ID: 0013
Revises: 0012
Create Date: 2026-11-26
"""

import sqlalchemy as sa
from alembic import op

revision = "0013"
down_revision = "0012"
branch_labels = None
depends_on = None

LEASE_TABLES = ("lakelock_commit_leases", "lakelock_maintenance_leases", "lakelock_claims")


def upgrade() -> None:
    for name in LEASE_TABLES:
        with op.batch_alter_table(name) as batch:
            batch.add_column(sa.Column("principal", sa.String(255)))
            batch.add_column(sa.Column("renewals", sa.Integer, nullable=False, server_default="0"))
    with op.batch_alter_table("lakelock_intents") as batch:
        batch.add_column(sa.Column("principal", sa.String(255)))


def downgrade() -> None:
    with op.batch_alter_table("lakelock_intents") as batch:
        batch.drop_column("principal")
    for name in reversed(LEASE_TABLES):
        with op.batch_alter_table(name) as batch:
            batch.drop_column("renewals")
            batch.drop_column("principal")
