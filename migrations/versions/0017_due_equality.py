"""due_equality: equality delete files counted apart among a partition's delete files

`lakelock_due.equality_delete_files`: of the delete files counted since the partition's last
compaction, those that delete by equality (a Flink upsert's). A partition is due at fewer of
them than of other delete files (LAKELOCK_DUE_EQUALITY_DELETE_FILES): every reader joins each
with every older data file of its partition (docs/design.md §5.1). Rows counted before this
revision count none.

Revision ID: 0017
Revises: 0016
Create Date: 2026-11-29
"""

import sqlalchemy as sa
from alembic import op

revision = "0017"
down_revision = "0016"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column(
        "lakelock_due",
        sa.Column("equality_delete_files", sa.BigInteger, nullable=False, server_default="0"),
    )


def downgrade() -> None:
    with op.batch_alter_table("lakelock_due") as batch:  # SQLite rebuilds the table
        batch.drop_column("equality_delete_files")
