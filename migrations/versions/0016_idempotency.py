"""idempotency: the catalog front's answers to requests that carried an Idempotency-Key

`lakelock_idempotency`: one row per (principal, key) of a mutation of the catalog front sent
with Iceberg's `Idempotency-Key` header (REST specification 1.11): a fingerprint of the
request, the answer's status, and its body, or for a table's answer the metadata file to read
it from; kept until `expires_at` (LAKELOCK_CATALOG_IDEMPOTENCY_LIFETIME_S), so that a resend is
answered as the first request was, never applied twice (docs/catalog-front.md §4).

Revision ID: 0016
Revises: 0015
Create Date: 2026-11-28
"""

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import mysql

revision = "0016"
down_revision = "0015"
branch_labels = None
depends_on = None

Instant = sa.DateTime().with_variant(mysql.DATETIME(fsp=6), "mysql", "mariadb")
LongText = sa.Text().with_variant(mysql.MEDIUMTEXT(), "mysql", "mariadb")


def upgrade() -> None:
    op.create_table(
        "lakelock_idempotency",
        sa.Column("principal", sa.String(255), primary_key=True),
        sa.Column("idempotency_key", sa.String(36), primary_key=True),
        sa.Column("fingerprint", sa.String(64), nullable=False),
        sa.Column("status", sa.Integer, nullable=False),
        sa.Column("body", LongText),
        sa.Column("location", sa.String(1000)),
        sa.Column("created_at", Instant, nullable=False),
        sa.Column("expires_at", Instant, nullable=False),
    )
    op.create_index("ix_lakelock_idempotency_expiry", "lakelock_idempotency", ["expires_at"])


def downgrade() -> None:
    op.drop_index("ix_lakelock_idempotency_expiry", table_name="lakelock_idempotency")
    op.drop_table("lakelock_idempotency")
