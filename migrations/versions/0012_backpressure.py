"""backpressure: a compactor may hold the writers of a partition whose debt passed its bound

`lakelock_intents.cause` tells a maintenance request's drain (`drain`, every intent before)
from a compactor's backpressure on one partition (`backpressure`); `lakelock_tables.backpressure`
is the operator's switch for it (`enabled` | `disabled`). A debt report also says how many
partitions are past the hard bound and the most debt in one partition (null in older reports).

Revision ID: 0012
Revises: 0011
Create Date: 2026-11-25
"""

import sqlalchemy as sa
from alembic import op

revision = "0012"
down_revision = "0011"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("lakelock_intents") as batch:
        batch.add_column(sa.Column("cause", sa.String(16), nullable=False, server_default="drain"))
    with op.batch_alter_table("lakelock_tables") as batch:
        batch.add_column(
            sa.Column("backpressure", sa.String(16), nullable=False, server_default="enabled")
        )
    with op.batch_alter_table("lakelock_debt") as batch:
        batch.add_column(sa.Column("partitions_over_bound", sa.BigInteger))
        batch.add_column(sa.Column("worst_partition", sa.BigInteger))


def downgrade() -> None:
    # a backpressure intent left would hold writers as a drain would, until its expiry: end them
    op.execute("DELETE FROM lakelock_intents WHERE cause = 'backpressure'")
    with op.batch_alter_table("lakelock_debt") as batch:
        batch.drop_column("worst_partition")
        batch.drop_column("partitions_over_bound")
    with op.batch_alter_table("lakelock_tables") as batch:
        batch.drop_column("backpressure")
    with op.batch_alter_table("lakelock_intents") as batch:
        batch.drop_column("cause")
