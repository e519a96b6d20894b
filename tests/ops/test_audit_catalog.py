"""`lakelock audit` reading a table through a pyiceberg catalog (a SQL catalog on a SQLite file,
the same tables Iceberg's JdbcCatalog keeps), its warehouse on local files and on S3, without
Spark; tests/spark/test_cluster.py runs it on tables the jobs wrote through the JdbcCatalog."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pytest
from typer.testing import CliRunner

from service.client import LeaseClient
from service.ops import cli
from service.ops.iceberg_audit import load_catalog_table, read_catalog_snapshots
from tests.conftest import Warehouse

TABLE = "lake.db.events"


@pytest.fixture(params=["file", pytest.param("s3", marks=pytest.mark.s3)])
def properties(request: pytest.FixtureRequest, tmp_path: Path) -> dict[str, str]:
    """A SQL catalog `lake` with table db.events: one snapshot under a lease id, one without;
    its warehouse on local files, or on the project's S3 server (the catalog's S3 settings
    among its properties, the keys in the environment)."""
    from pyiceberg.catalog import load_catalog

    props = {
        "type": "sql",
        "uri": f"sqlite:///{tmp_path / 'catalog.db'}",
        "warehouse": (tmp_path / "warehouse").as_uri(),
    }
    if request.param == "s3":
        s3 = request.getfixturevalue("s3_server")
        store = Warehouse(s3.warehouse(tmp_path.name), s3)
        props |= {"warehouse": store.uri, **store.client_properties()}
    catalog = load_catalog("lake", **props)
    catalog.create_namespace("db")
    rows = pa.table({"event_id": pa.array(["a", "b"], pa.string())})
    table = catalog.create_table("db.events", schema=rows.schema)
    table.append(rows, snapshot_properties={"lakelock.lease-id": "not-a-granted-lease"})
    table.append(rows)
    return props


def test_snapshots_come_from_the_catalogs_current_metadata(properties):
    snapshots = read_catalog_snapshots(TABLE, properties=properties)
    assert [s.kind for s in snapshots] == ["ingest", "unattributed"]
    assert snapshots[0].lease_id == "not-a-granted-lease"
    # a namespace.table name takes the catalog's name separately
    again = read_catalog_snapshots("db.events", catalog="lake", properties=properties)
    assert [s.snapshot_id for s in again] == [s.snapshot_id for s in snapshots]


def test_a_missing_table_or_an_unnamed_catalog_is_a_clear_error(properties):
    with pytest.raises(FileNotFoundError, match=r"lake\.db\.nothing: not in catalog 'lake'"):
        load_catalog_table("lake.db.nothing", properties=properties)
    with pytest.raises(ValueError, match=r"catalog\.namespace\.table"):
        load_catalog_table("db.events", properties=properties)


@pytest.fixture
def lakelock(api, monkeypatch):
    monkeypatch.setattr(cli, "client_factory", lambda url, token: LeaseClient(http=api, retries=0))
    return lambda *args: CliRunner().invoke(cli.app, list(args), env={"COLUMNS": "80"})


def test_the_audit_command_reads_the_table_through_its_catalog(lakelock, properties):
    flags = [part for key, value in properties.items() for part in ("-p", f"{key}={value}")]
    result = lakelock("audit", TABLE, *flags, "--json")
    assert result.exit_code == 1, result.output  # neither commit was inside a granted lease
    report = json.loads(result.stdout)
    assert report["snapshots_checked"] == 2 and len(report["violations"]) == 2

    result = lakelock("audit", "lake.db.nothing", *flags)
    assert result.exit_code == 2
    assert len(result.stderr.strip().splitlines()) == 1
    assert "not in catalog" in result.stderr

    result = lakelock("audit", TABLE, "-p", "type")
    assert result.exit_code == 2 and "KEY=VALUE" in result.stderr
