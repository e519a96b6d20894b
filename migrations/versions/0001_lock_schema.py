"""the lock schema: tables (switch, maintenance lease, intent), commit leases, events

Revision ID: 0001
Revises:
Create Date: 2026-11-21
"""

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import mysql

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None

# DATETIME(6): MySQL's default DATETIME drops the microseconds that expiry is judged by
Instant = sa.DateTime().with_variant(mysql.DATETIME(fsp=6), "mysql", "mariadb")
BigId = sa.BigInteger().with_variant(sa.Integer, "sqlite")


def upgrade() -> None:
    op.create_table(
        "lakelock_tables",
        sa.Column("name", sa.String(255), primary_key=True),
        sa.Column("ingest", sa.String(16), nullable=False),
        sa.Column("maintenance", sa.String(16), nullable=False),
        sa.Column("switch_reason", sa.String(1024)),
        sa.Column("switch_by", sa.String(255)),
        sa.Column("switch_at", Instant),
        sa.Column("maint_lease_id", sa.String(36)),
        sa.Column("maint_holder", sa.String(255)),
        sa.Column("maint_request_id", sa.String(128)),
        sa.Column("maint_token", sa.BigInteger),
        sa.Column("maint_ttl_s", sa.Float),
        sa.Column("maint_acquired_at", Instant),
        sa.Column("maint_expires_at", Instant),
        sa.Column("maint_ended_at", Instant),
        sa.Column("maint_end", sa.String(16)),
        sa.Column("intent_holder", sa.String(255)),
        sa.Column("intent_request_id", sa.String(128)),
        sa.Column("intent_opened_at", Instant),
        sa.Column("intent_expires_at", Instant),
        sa.Column("next_token", sa.BigInteger, nullable=False),
        sa.Column("version", sa.BigInteger, nullable=False),
        sa.Column("created_at", Instant, nullable=False),
    )
    op.create_index("ix_lakelock_tables_maint_lease", "lakelock_tables", ["maint_lease_id"])
    op.create_table(
        "lakelock_commit_leases",
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
    op.create_index(
        "ix_lakelock_commit_leases_live",
        "lakelock_commit_leases",
        ["table_name", "ended_at", "expires_at"],
    )
    op.create_index(
        "ix_lakelock_commit_leases_request", "lakelock_commit_leases", ["table_name", "request_id"]
    )
    op.create_table(
        "lakelock_events",
        sa.Column("id", BigId, primary_key=True, autoincrement=True),
        sa.Column("at", Instant, nullable=False),
        sa.Column("table_name", sa.String(255), nullable=False),
        sa.Column("event", sa.String(32), nullable=False),
        sa.Column("lease_id", sa.String(36)),
        sa.Column("kind", sa.String(16)),
        sa.Column("holder", sa.String(255)),
        sa.Column("token", sa.BigInteger),
        sa.Column("actor", sa.String(255)),
        sa.Column("detail", sa.Text),
    )
    op.create_index("ix_lakelock_events_table", "lakelock_events", ["table_name", "id"])
    op.create_index("ix_lakelock_events_lease", "lakelock_events", ["lease_id"])


def downgrade() -> None:
    op.drop_table("lakelock_events")
    op.drop_table("lakelock_commit_leases")
    op.drop_table("lakelock_tables")
