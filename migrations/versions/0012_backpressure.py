"""backpressure: a compactor may hold the writers of a partition whose debt passed its bound

`lakelock_intents.cause` tells a maintenance request's drain (`drain`, every intent before)
from a compactor's backpressure on one partition (`backpressure`); `lakelock_tables.backpressure`
is the operator's switch for it (`enabled` | `disabled`).

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


def downgrade() -> None:
    # a backpressure intent left would hold writers as a drain would, until its expiry: end them
    op.execute("DELETE FROM lakelock_intents WHERE cause = 'backpressure'")
    with op.batch_alter_table("lakelock_tables") as batch:
        batch.drop_column("backpressure")
    with op.batch_alter_table("lakelock_intents") as batch:
        batch.drop_column("cause")
