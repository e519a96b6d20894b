"""audit details as long as the scopes they carry: lakelock_events.detail is MEDIUMTEXT

An event's detail holds the partitions of its lease or intent, which a lease row stores in
MEDIUMTEXT (up to 1,000 names of 512 characters). In a 64 KiB TEXT, MySQL and MariaDB refused
the event of a large scope, so its grant failed, and so did every later write on its table once
such an intent had expired (its `intent.expired` event is the larger one). SQLite's TEXT has no
such limit: nothing changes there.

Revision ID: 0006
Revises: 0005
Create Date: 2026-11-22
"""

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import mysql

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None


def _mysql() -> bool:
    return op.get_bind().dialect.name in ("mysql", "mariadb")


def upgrade() -> None:
    if _mysql():
        op.alter_column(
            "lakelock_events", "detail", type_=mysql.MEDIUMTEXT(), existing_type=sa.Text()
        )


def downgrade() -> None:
    # a detail longer than 64 KiB makes this fail on a strict server, and changes nothing
    if _mysql():
        op.alter_column(
            "lakelock_events", "detail", type_=sa.Text(), existing_type=mysql.MEDIUMTEXT()
        )
