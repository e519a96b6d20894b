"""catalog pointers: the tables of Iceberg's JdbcCatalog, for the catalog front

`iceberg_tables` (one row per table: its current metadata file) and
`iceberg_namespace_properties`, in the JdbcCatalog's V1 schema, created only where they are
missing: a database that already holds a JDBC catalog keeps its rows and is served as it is.
A JdbcCatalog of the V0 schema (no `iceberg_type`) gets the column, as Iceberg itself adds it.

Revision ID: 0011
Revises: 0010
Create Date: 2026-11-25
"""

import sqlalchemy as sa
from alembic import op

revision = "0011"
down_revision = "0010"
branch_labels = None
depends_on = None


def upgrade() -> None:
    inspector = sa.inspect(op.get_bind())
    existing = set(inspector.get_table_names())
    if "iceberg_tables" not in existing:
        op.create_table(
            "iceberg_tables",
            sa.Column("catalog_name", sa.String(255), primary_key=True),
            sa.Column("table_namespace", sa.String(255), primary_key=True),
            sa.Column("table_name", sa.String(255), primary_key=True),
            sa.Column("metadata_location", sa.String(1000)),
            sa.Column("previous_metadata_location", sa.String(1000)),
            sa.Column("iceberg_type", sa.String(5)),
        )
    elif "iceberg_type" not in {c["name"] for c in inspector.get_columns("iceberg_tables")}:
        op.add_column("iceberg_tables", sa.Column("iceberg_type", sa.String(5)))
    if "iceberg_namespace_properties" not in existing:
        op.create_table(
            "iceberg_namespace_properties",
            sa.Column("catalog_name", sa.String(255), primary_key=True),
            sa.Column("namespace", sa.String(255), primary_key=True),
            sa.Column("property_key", sa.String(255), primary_key=True),
            sa.Column("property_value", sa.String(1000)),
        )


def downgrade() -> None:
    # the pointers are a catalog's: dropped only while they point at nothing, never with rows
    bind = op.get_bind()
    existing = set(sa.inspect(bind).get_table_names())
    for table in ("iceberg_tables", "iceberg_namespace_properties"):
        if (
            table in existing
            and bind.execute(sa.text(f"SELECT COUNT(*) FROM {table}")).scalar() == 0
        ):
            op.drop_table(table)
