"""scoped leases: several maintenance leases and intents per table, each with its partitions

A lease covers the whole table or a set of partitions (docs/design.md §4), so one table may have
several live maintenance leases (on disjoint partitions) and several open intents. They move out
of the table row into rows of their own, `lakelock_maintenance_leases` and `lakelock_intents`;
every lease and intent carries its partitions (NULL: the whole table). The table row keeps the
switch and the fencing-token counter, and `holds_until`, the instant after which none of the
table's maintenance leases or intents is live, so a commit grant reads them only when one may be.

The maintenance lease and intent a table row holds are carried over as they are.

Revision ID: 0005
Revises: 0004
Create Date: 2026-11-22
"""

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import mysql

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None

Instant = sa.DateTime().with_variant(mysql.DATETIME(fsp=6), "mysql", "mariadb")
Scope = sa.Text().with_variant(mysql.MEDIUMTEXT(), "mysql", "mariadb")

_MAINTENANCE_COLUMNS = (
    ("maint_lease_id", sa.String(36)),
    ("maint_holder", sa.String(255)),
    ("maint_request_id", sa.String(128)),
    ("maint_token", sa.BigInteger),
    ("maint_ttl_s", sa.Float),
    ("maint_acquired_at", Instant),
    ("maint_expires_at", Instant),
    ("maint_ended_at", Instant),
    ("maint_end", sa.String(16)),
    ("intent_holder", sa.String(255)),
    ("intent_request_id", sa.String(128)),
    ("intent_opened_at", Instant),
    ("intent_expires_at", Instant),
)


def upgrade() -> None:
    op.create_table(
        "lakelock_maintenance_leases",
        sa.Column("id", sa.String(36), primary_key=True),
        sa.Column("table_name", sa.String(255), nullable=False),
        sa.Column("holder", sa.String(255), nullable=False),
        sa.Column("request_id", sa.String(128), nullable=False),
        sa.Column("token", sa.BigInteger, nullable=False),
        sa.Column("partitions", Scope),
        sa.Column("ttl_s", sa.Float, nullable=False),
        sa.Column("acquired_at", Instant, nullable=False),
        sa.Column("expires_at", Instant, nullable=False),
        sa.Column("ended_at", Instant),
        sa.Column("end", sa.String(16)),
    )
    op.create_index(
        "ix_lakelock_maintenance_leases_live",
        "lakelock_maintenance_leases",
        ["table_name", "ended_at", "expires_at"],
    )
    op.create_index(
        "ux_lakelock_maintenance_leases_request",
        "lakelock_maintenance_leases",
        ["table_name", "request_id"],
        unique=True,
    )
    op.create_index(
        "ix_lakelock_maintenance_leases_ended",
        "lakelock_maintenance_leases",
        ["ended_at", "expires_at"],
    )
    op.create_table(
        "lakelock_intents",
        sa.Column("table_name", sa.String(255), primary_key=True),
        sa.Column("request_id", sa.String(128), primary_key=True),
        sa.Column("holder", sa.String(255), nullable=False),
        sa.Column("partitions", Scope),
        sa.Column("opened_at", Instant, nullable=False),
        sa.Column("expires_at", Instant, nullable=False),
    )
    op.create_index("ix_lakelock_intents_expires", "lakelock_intents", ["expires_at"])
    op.add_column("lakelock_commit_leases", sa.Column("partitions", Scope))
    op.add_column("lakelock_tables", sa.Column("holds_until", Instant))
    old = _old_tables()
    for new, columns, present in (
        (_leases(), _LEASE_FROM_ROW, old.c.maint_lease_id),
        (_intents(), _INTENT_FROM_ROW, old.c.intent_holder),
    ):
        rows = sa.select(*(old.c[column] for column in columns.values()))
        op.execute(sa.insert(new).from_select(list(columns), rows.where(present.is_not(None))))
    # a carried-over lease or intent counts until its own expiry; the later of the two
    op.execute(
        "UPDATE lakelock_tables SET holds_until = CASE "
        "WHEN intent_expires_at IS NOT NULL AND (maint_expires_at IS NULL "
        "OR maint_ended_at IS NOT NULL OR intent_expires_at > maint_expires_at) "
        "THEN intent_expires_at "
        "WHEN maint_ended_at IS NULL THEN maint_expires_at END"
    )
    with op.batch_alter_table("lakelock_tables") as batch:  # SQLite rebuilds the table
        batch.drop_index("ix_lakelock_tables_maint_lease")
        for name, _ in _MAINTENANCE_COLUMNS:
            batch.drop_column(name)


def downgrade() -> None:
    with op.batch_alter_table("lakelock_tables") as batch:
        for name, kind in _MAINTENANCE_COLUMNS:
            batch.add_column(sa.Column(name, kind))
        batch.create_index("ix_lakelock_tables_maint_lease", ["maint_lease_id"])
        batch.drop_column("holds_until")
    # one maintenance lease and one intent of each table go back into its row, as the old
    # schema holds no more: the live lease (the newest if several), the intent that lasts
    # longest
    bind = op.get_bind()
    leases, intents, tables = _leases(), _intents(), _old_tables()
    # the last one written wins: a live lease over ended ones, then the highest token
    order = (leases.c.ended_at.is_(None), leases.c.token)
    for rows, columns in (
        (sa.select(leases).order_by(*order), _LEASE_FROM_ROW),
        (sa.select(intents).order_by(intents.c.expires_at), _INTENT_FROM_ROW),
    ):
        for row in bind.execute(rows).mappings():
            values = {old: row[new] for new, old in columns.items() if new != "table_name"}
            bind.execute(
                sa.update(tables).where(tables.c.name == row["table_name"]).values(**values)
            )
    with op.batch_alter_table("lakelock_commit_leases") as batch:
        batch.drop_column("partitions")
    op.drop_table("lakelock_intents")
    op.drop_table("lakelock_maintenance_leases")


# where each column of the new tables lived in the row of revision 0004 (`name` is the table)
_LEASE_FROM_ROW = {
    "id": "maint_lease_id",
    "table_name": "name",
    "holder": "maint_holder",
    "request_id": "maint_request_id",
    "token": "maint_token",
    "ttl_s": "maint_ttl_s",
    "acquired_at": "maint_acquired_at",
    "expires_at": "maint_expires_at",
    "ended_at": "maint_ended_at",
    "end": "maint_end",
}
_INTENT_FROM_ROW = {
    "table_name": "name",
    "request_id": "intent_request_id",
    "holder": "intent_holder",
    "opened_at": "intent_opened_at",
    "expires_at": "intent_expires_at",
}


def _leases() -> sa.TableClause:
    return sa.table("lakelock_maintenance_leases", *(sa.column(n) for n in _LEASE_FROM_ROW))


def _intents() -> sa.TableClause:
    return sa.table("lakelock_intents", *(sa.column(n) for n in _INTENT_FROM_ROW))


def _old_tables() -> sa.TableClause:
    """lakelock_tables with the maintenance columns of revision 0004."""
    columns = (sa.column(name) for name, _ in _MAINTENANCE_COLUMNS)
    return sa.table("lakelock_tables", sa.column("name"), *columns)
