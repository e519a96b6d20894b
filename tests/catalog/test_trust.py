"""The catalog front against a hostile client (docs/catalogs.md, "What the front refuses"),
through the real HTTP API of a service process on SQLite and on MariaDB.

Each refusal is a 400 that says what to fix and changes nothing: no file written (in the
warehouse or outside it), no pointer moved, no code of the client's choosing run. The
legitimate paths stay open: a default or free custom location, appends, a merge-on-read
commit, a rewrite under a maintenance lease.
"""

from __future__ import annotations

import json
import os
import random
import shutil
import threading
import time
from collections.abc import Iterator
from datetime import date
from pathlib import Path
from typing import Any

import httpx
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from pyiceberg.catalog.rest import RestCatalog
from pyiceberg.exceptions import CommitFailedException
from pyiceberg.io.fsspec import FsspecFileIO
from pyiceberg.io.pyarrow import _dataframe_to_data_files
from pyiceberg.manifest import (
    DataFile,
    DataFileContent,
    FileFormat,
    read_manifest_list,
    write_manifest_list,
)
from pyiceberg.table.snapshots import Operation
from pyiceberg.table.update.snapshot import _FastAppendFiles
from pyiceberg.typedef import Record
from sqlalchemy import create_engine, update

from service.catalog import changes, locations
from service.catalog.manifests import Written
from service.catalog.pointers import Pointers
from service.lock.db import iceberg_tables_t
from service.wire.errors import InvalidRequest
from tests.catalog.test_front import SCHEMA, SPEC, maintenance_lease, rows
from tests.conftest import BOTH_DATABASES, TOKENS, auth, start_front
from tests.support.helpers import wait_until
from tests.support.iceberg_commits import rewrite_body

pytestmark = pytest.mark.dialect  # on SQLite and MariaDB (tests/conftest.py)

CATALOG = "lakelock"
MODULE = "tests.support.catalog_trust_marker.Named"  # importing it leaves the marker file
ADDED_SNAPSHOT_ID = 6  # the field's place in a manifest list's record (Iceberg's spec)


@pytest.fixture(scope="module", params=BOTH_DATABASES)
def front(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Any]:
    marker = tmp_path_factory.mktemp("trust-marker") / "marker"
    server = start_front(
        request,
        tmp_path_factory,
        "trust",
        LAKELOCK_CATALOG_MAX_METADATA_BYTES=str(256 * 1024),
        LAKELOCK_CATALOG_MAX_PROPERTIES="20",
        LAKELOCK_CATALOG_MAX_PROPERTY_CHARS="300",
        LAKELOCK_CATALOG_MAX_NAME_CHARS="64",
        LAKELOCK_TEST_TRUST_MARKER=str(marker),
    )
    server.marker = marker  # type: ignore[attr-defined]
    yield server
    assert not marker.exists(), "the service imported a class a client named"
    server.stop()


def api(front: Any, role: str = "job") -> httpx.Client:
    return httpx.Client(base_url=f"{front.url}/iceberg", headers=auth(role), timeout=30)


def rest(front: Any) -> RestCatalog:
    return RestCatalog(CATALOG, uri=f"{front.url}/iceberg", token=TOKENS["job"])


def new_table(front: Any, namespace: str, name: str = "t", **create: Any) -> Any:
    catalog = rest(front)
    if (namespace,) not in catalog.list_namespaces():
        catalog.create_namespace(namespace)
    table = catalog.create_table(f"{namespace}.{name}", SCHEMA, partition_spec=SPEC, **create)
    table.append(rows(3, date(2024, 6, 20)))
    table.append(rows(3, date(2024, 6, 21), start=10))
    return catalog.load_table(f"{namespace}.{name}")


def schema_json() -> dict[str, Any]:
    return json.loads(SCHEMA.model_dump_json())


def create_body(name: str, **fields: Any) -> dict[str, Any]:
    return {"name": name, "schema": schema_json(), **fields}


def all_files(root: Path) -> set[Path]:
    return {p for p in root.rglob("*") if p.is_file()} if root.exists() else set()


def pointer(front: Any, table: Any) -> str:
    return rest(front).load_table(table.name()).metadata_location


def post_commit(front: Any, table: Any, body: dict[str, Any], **headers: str) -> httpx.Response:
    namespace, name = table.name()
    with api(front) as c:
        return c.post(f"/v1/namespaces/{namespace}/tables/{name}", json=body, headers=headers)


def rename(front: Any, source: tuple[str, str], destination: tuple[str, str]) -> httpx.Response:
    """An operator's rename of `source` (namespace, name) to `destination`."""
    body = {
        "source": {"namespace": [source[0]], "name": source[1]},
        "destination": {"namespace": [destination[0]], "name": destination[1]},
    }
    with api(front, "operator") as c:
        return c.post("/v1/tables/rename", json=body)


def set_properties(properties: dict[str, str]) -> dict[str, Any]:
    return {"requirements": [], "updates": [{"action": "set-properties", "updates": properties}]}


def refused(response: httpx.Response, *words: str) -> None:
    assert response.status_code == 400, response.text
    body = response.json()
    assert response.headers["content-type"].startswith("application/problem+json")
    assert body["error"]["type"] == "BadRequestException"
    for word in words:
        assert word in body["detail"], body["detail"]


def unchanged(front: Any, table: Any, before: set[Path]) -> None:
    """The table's pointer and every file of the warehouse are as they were."""
    assert pointer(front, table) == table.metadata_location
    assert all_files(front.warehouse) == before


def producer_body(producer: Any, label: str | None = None) -> dict[str, Any]:
    """The commit body a pyiceberg snapshot producer makes, its operation relabelled."""
    updates, requirements = producer._commit()
    body = {
        "requirements": [json.loads(r.model_dump_json()) for r in requirements],
        "updates": [json.loads(u.model_dump_json()) for u in updates],
    }
    for u in body["updates"]:
        if u["action"] == "add-snapshot" and label is not None:
            u["snapshot"]["summary"]["operation"] = label
    return body


def rewrite(table: Any, day: date, label: str, properties: dict[str, str]) -> dict[str, Any]:
    """A partition's files replaced by one file of the same rows, labelled `label`."""
    body = rewrite_body(table, day, properties, label)
    assert body is not None, f"no files in dt={day}"
    return body


# -- classes a client names -------------------------------------------------------------------


@pytest.mark.parametrize(
    "key", ["py-io-impl", "write.py-location-provider.impl", "io-impl", "write.custom.impl"]
)
def test_a_property_that_names_a_class_is_refused_everywhere_and_nothing_runs(front, key):
    table = new_table(front, f"cls_{key.replace('.', '_').replace('-', '_')}")
    namespace, _ = table.name()
    before = all_files(front.warehouse)
    with api(front) as c:
        for stage in (False, True):
            made = c.post(
                f"/v1/namespaces/{namespace}/tables",
                json=create_body("other", properties={key: MODULE}, **{"stage-create": stage}),
            )
            refused(made, key, "chooses a class")
    refused(post_commit(front, table, set_properties({key: MODULE})), key)
    unchanged(front, table, before)
    assert ("other",) not in [t[1:] for t in rest(front).list_tables(namespace)]
    assert not front.marker.exists()


def test_a_location_that_is_code_meets_no_exec(front):
    rest(front).create_namespace("exec_ns")
    code = f"import pathlib; pathlib.Path({str(front.marker)!r}).touch()"
    before = all_files(front.warehouse)
    with api(front) as c:
        made = c.post(
            "/v1/namespaces/exec_ns/tables",
            json=create_body(
                "t", location=code, properties={"write.py-location-provider.impl": "builtins.exec"}
            ),
        )
    refused(made, "write.py-location-provider.impl")
    assert not front.marker.exists()
    assert all_files(front.warehouse) == before


def test_a_stored_table_naming_classes_loads_and_commits_without_running_them(front):
    """A table another catalog wrote with such properties: the service reads and writes it
    with its own file access and its own metadata folder."""
    table = new_table(front, "stored")
    planted = table.metadata.model_copy(
        update={
            "properties": {
                **table.metadata.properties,
                "py-io-impl": MODULE,
                "write.py-location-provider.impl": MODULE,
                "write.metadata.path": "file:///nowhere/metadata",
                "s3.endpoint": "http://attacker.example",
                "s3.signer.uri": "http://attacker.example",
                "header.X-Forwarded": "x",
                "Token": "stolen",
            }
        }
    )
    location = locations.metadata_file(table.metadata.location, 9)
    Path(location.removeprefix("file://")).write_text(planted.model_dump_json())
    engine = create_engine(front.db_url)
    with engine.begin() as conn:
        conn.execute(
            update(iceberg_tables_t)
            .where(
                iceberg_tables_t.c.table_name == "t", iceberg_tables_t.c.table_namespace == "stored"
            )
            .values(metadata_location=location)
        )
    engine.dispose()
    unsafe = {"py-io-impl", "write.py-location-provider.impl", "s3.endpoint", "s3.signer.uri"}
    unsafe |= {"header.X-Forwarded", "Token"}
    with api(front, "reader") as c:
        loaded = c.get("/v1/namespaces/stored/tables/t")
    assert loaded.status_code == 200
    # answered without them: pyiceberg would build every loading client's FileIO from them
    shown = loaded.json()["metadata"]["properties"]
    assert not unsafe & set(shown) and shown["write.metadata.path"] == "file:///nowhere/metadata"
    assert "s3.endpoint" not in rest(front).load_table("stored.t").io.properties
    passed = post_commit(front, table, set_properties({"owner": "ops"}))
    assert passed.status_code == 200, passed.text
    assert not unsafe & set(passed.json()["metadata"]["properties"])
    assert passed.json()["metadata"]["properties"]["owner"] == "ops"
    new = passed.json()["metadata-location"]
    assert new.startswith(table.metadata.location + "/metadata/")
    stored = json.loads(Path(new.removeprefix("file://")).read_text())["properties"]
    assert unsafe <= set(stored)  # kept in the file, as another catalog wrote them
    removal = {
        "requirements": [],
        "updates": [{"action": "remove-properties", "removals": ["Token"]}],
    }
    removed = post_commit(front, table, removal)
    assert removed.status_code == 200, removed.text
    new = removed.json()["metadata-location"]
    assert "Token" not in json.loads(Path(new.removeprefix("file://")).read_text())["properties"]
    assert not front.marker.exists() and not Path("/nowhere").exists()


ACCESS_KEYS = [
    "s3.endpoint",
    "s3.signer.uri",
    "S3.Proxy-URI",
    "s3.access-key-id",
    "header.Authorization",
    " token ",
    "credential",
    "URI",
    "warehouse",
    "prefix",
    "client.region",
    "adls.account-key",
    "gcs.oauth2.token",
    "oss.endpoint",
    "hdfs.host",
    "hf.token",
    "rest.signing-name",
    "py-arrow-option",
]


def test_a_property_that_configures_file_access_is_refused_everywhere(front):
    table = new_table(front, "access")
    before = all_files(front.warehouse)
    with api(front) as c:
        for key in ACCESS_KEYS:
            for stage in (False, True):
                made = c.post(
                    "/v1/namespaces/access/tables",
                    json=create_body(
                        "other", properties={key: "http://x.example"}, **{"stage-create": stage}
                    ),
                )
                refused(made, repr(key), "configures file access")
            answer = post_commit(front, table, set_properties({key: "http://x.example"}))
            refused(answer, repr(key), "your own client's catalog properties")
        assert c.head("/v1/namespaces/access/tables/other").status_code == 404
    unchanged(front, table, before)


def test_ordinary_table_properties_pass(front):
    ordinary = {
        "format-version": "2",
        "write.format.default": "parquet",
        "write.parquet.compression-codec": "zstd",
        "write.merge.mode": "merge-on-read",
        "write.update.mode": "merge-on-read",
        "write.delete.mode": "merge-on-read",
        "write.distribution-mode": "hash",
        "write.target-file-size-bytes": "134217728",
        "write.metadata.delete-after-commit.enabled": "true",
        "write.object-storage.enabled": "false",
        "read.split.target-size": "134217728",
        "commit.retry.num-retries": "10",
        "history.expire.max-snapshot-age-ms": "86400000",
        "gc.enabled": "true",
        "owner": "ingest",
        "comment": "events",
    }
    table = new_table(front, "ordinary", properties=ordinary)
    assert table.metadata.properties["write.merge.mode"] == "merge-on-read"
    later = {"created-at": "2024-06-20T00:00:00Z", "engine.hive.enabled": "false"}
    passed = post_commit(front, table, set_properties(later))
    assert passed.status_code == 200, passed.text
    assert passed.json()["metadata"]["properties"]["created-at"] == later["created-at"]


def test_file_access_is_built_from_the_catalogs_properties_only(tmp_path):
    pointers = Pointers(CATALOG, create_engine("sqlite://"), warehouse=tmp_path.as_uri())
    io = pointers._load_file_io(
        {"py-io-impl": MODULE, "s3.endpoint": "http://attacker.example", "s3.access-key-id": "k"},
        (tmp_path / "x").as_uri(),
    )
    assert isinstance(io, FsspecFileIO) and io is pointers.storage.io
    assert "s3.endpoint" not in io.properties and "s3.access-key-id" not in io.properties


# -- where tables live ------------------------------------------------------------------------


def test_locations_outside_the_warehouse_or_over_another_table_are_refused(front):
    table = new_table(front, "loc")
    own = table.metadata.location
    warehouse = front.warehouse.as_uri()
    outside = front.folder / "outside"
    before = all_files(front.warehouse)
    bad = {
        outside.as_uri(): "outside the warehouse",
        warehouse: "outside the warehouse",
        f"{warehouse}/loc": "outside the warehouse",
        f"{warehouse}/other_ns/x": "outside the warehouse",
        f"{warehouse}/loc/t": "overlaps table loc.t",
        f"{warehouse}/loc/t/": "overlaps table loc.t",
        own.replace("file:///", "file:/"): "overlaps table loc.t",
        f"{warehouse}/loc/T": "overlaps table loc.t",
        f"{warehouse}/loc/t/data/inner": "overlaps table loc.t",
        f"{warehouse}/loc/x/../t": "path segments",
        f"{warehouse}/loc//t": "path segments",
        f"{warehouse}/loc/%2e%2e/x": "path segments",
        f"{warehouse}/loc/x\\..\\t": "path segments",
        "/relative/or/absolute/path": "with a scheme",
    }
    with api(front) as c:
        for location, why in bad.items():
            made = c.post("/v1/namespaces/loc/tables", json=create_body("u", location=location))
            refused(made, why)
            assert "is " in made.json()["detail"]  # says what is allowed
            assert c.head("/v1/namespaces/loc/tables/u").status_code == 404
    unchanged(front, table, before)
    assert not outside.exists()


def test_a_table_may_live_in_a_free_folder_of_its_namespace(front):
    warehouse = front.warehouse.as_uri()
    table = new_table(
        front, "free", location=f"{warehouse.replace('file:///', 'file:/')}/free/custom/"
    )
    assert table.metadata.location == f"{warehouse}/free/custom"
    assert (front.warehouse / "free" / "custom" / "data").is_dir()
    beside = new_table(front, "free", "u")  # the default beside it: overlaps nothing
    assert beside.metadata.location == f"{warehouse}/free/u"


def test_set_location_and_write_paths_elsewhere_are_refused(front):
    table = new_table(front, "moves")
    warehouse = front.warehouse.as_uri()
    before = all_files(front.warehouse)
    moved = {
        "requirements": [],
        "updates": [{"action": "set-location", "location": (front.folder / "away").as_uri()}],
    }
    refused(post_commit(front, table, moved), "outside the warehouse")
    for key in locations.PATH_PROPERTIES:
        for elsewhere in ((front.folder / "away").as_uri(), f"{warehouse}/moves/other"):
            refused(post_commit(front, table, set_properties({key: elsewhere})), key)
    with api(front) as c:
        made = c.post(
            "/v1/namespaces/moves/tables",
            json=create_body("u", properties={"write.data.path": f"{warehouse}/moves/t/data"}),
        )
    refused(made, "write.data.path")
    unchanged(front, table, before)
    inside = set_properties({"write.data.path": f"{table.metadata.location}/files"})
    assert post_commit(front, table, inside).status_code == 200
    ok = {
        "requirements": [],
        "updates": [{"action": "set-location", "location": f"{warehouse}/moves/t2"}],
    }
    ok["updates"].append(
        {"action": "set-properties", "updates": {"write.data.path": f"{warehouse}/moves/t2/files"}}
    )
    passed = post_commit(front, table, ok)
    assert passed.status_code == 200, passed.text
    assert passed.json()["metadata-location"].startswith(f"{warehouse}/moves/t2/metadata/")


def test_a_new_table_of_a_renamed_tables_old_name_gets_a_folder_of_its_own(front):
    table = new_table(front, "ren")
    old = table.metadata.location
    renamed = rename(front, ("ren", "t"), ("ren", "kept"))
    assert renamed.status_code == 204, renamed.text
    assert rest(front).load_table("ren.kept").metadata.location == old
    again = rest(front).create_table("ren.t", SCHEMA, partition_spec=SPEC)
    assert not locations.overlap(again.metadata.location, old)
    assert again.metadata.location.startswith(old + "-")
    with api(front) as c:  # and the old folder is not free for a custom location either
        refused(
            c.post("/v1/namespaces/ren/tables", json=create_body("z", location=old)),
            "overlaps table ren.kept",
        )


def test_concurrent_creates_of_overlapping_locations_leave_one_table(front):
    rest(front).create_namespace("race")
    warehouse = front.warehouse.as_uri()
    wanted = [f"{warehouse}/race/shared"] * 3 + [f"{warehouse}/race/shared/inner"] * 3
    answers: list[int] = []

    def create(i: int, location: str) -> None:
        with api(front) as c:
            made = c.post(
                "/v1/namespaces/race/tables", json=create_body(f"t{i}", location=location)
            )
        answers.append(made.status_code)

    threads = [threading.Thread(target=create, args=(i, w)) for i, w in enumerate(wanted)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(answers) == [200] + [400] * 5, answers
    assert len(rest(front).list_tables("race")) == 1
    metadata = list((front.warehouse / "race").rglob("*.metadata.json"))
    assert len(metadata) == 1  # the refused creates deleted what they wrote


def test_a_purge_deletes_only_the_tables_own_files(front, caplog):
    events = new_table(front, "bait_ns", "events")
    theirs = sorted(task.file.file_path for task in events.scan().plan_files())
    bait = rest(front).create_table("bait_ns.bait", SCHEMA, partition_spec=SPEC)
    bait.add_files([theirs[0]])
    bait.append(rows(2, date(2024, 6, 22), start=50))
    bait = rest(front).load_table("bait_ns.bait")
    bait_folder = Path(bait.metadata.location.removeprefix("file://"))
    assert any(bait_folder.rglob("*.parquet"))
    with api(front, "operator") as c:
        dropped = c.delete("/v1/namespaces/bait_ns/tables/bait", params={"purgeRequested": "true"})
    assert dropped.status_code == 204, dropped.text
    purged(front, "bait_ns.bait", "left 1 files outside its location")  # after the answer
    assert all(Path(p.removeprefix("file://")).exists() for p in theirs)
    assert not [p for p in bait_folder.rglob("*") if p.is_file()]
    assert sorted(rest(front).load_table("bait_ns.events").scan().to_arrow()["id"].to_pylist()) == [
        0,
        1,
        2,
        10,
        11,
        12,
    ]


def purged(front: Any, table: str, said: str) -> None:
    """Wait until the purge of `table` (run after its drop was answered) logged `said`."""
    log = front.folder / f"service-{front.url.rsplit(':', 1)[1]}.log"
    wait_until(lambda: f"purge of {table} {said}" in log.read_text(), f"the purge of {table}")


def test_a_symbolic_link_in_the_warehouse_is_no_tables_folder(front):
    """Locations are compared as written, so a link would make another table's folder (or
    one outside the warehouse) a new table's: every location through one is refused."""
    events = new_table(front, "link_ns", "events")
    folder = front.warehouse / "link_ns"
    outside = front.folder / "linked-outside"
    outside.mkdir()
    os.symlink(folder / "events", folder / "alias")
    os.symlink(outside, folder / "out")
    (folder / "real").mkdir()
    os.symlink(folder / "events" / "data", folder / "real" / "data")
    warehouse = front.warehouse.as_uri()
    before = all_files(front.warehouse)
    with api(front) as c:
        made = c.post("/v1/namespaces/link_ns/tables", json=create_body("alias"))
        refused(made, "symbolic link")  # the default folder is the link
        for location in ("alias", "alias/inner", "out", "out/t"):
            made = c.post(
                "/v1/namespaces/link_ns/tables",
                json=create_body("u", location=f"{warehouse}/link_ns/{location}"),
            )
            refused(made, "symbolic link")
        assert c.head("/v1/namespaces/link_ns/tables/u").status_code == 404
    moved = {
        "requirements": [],
        "updates": [{"action": "set-location", "location": f"{warehouse}/link_ns/out/t"}],
    }
    refused(post_commit(front, events, moved), "symbolic link")
    real = rest(front).create_table(
        "link_ns.real", SCHEMA, location=f"{warehouse}/link_ns/real"
    )  # a folder with a link inside is a location; its data path through the link is not
    refused(
        post_commit(front, real, set_properties({"write.data.path": f"{real.location()}/data"})),
        "write.data.path",
    )
    unchanged(front, events, before | all_files(folder / "real"))
    assert not any(outside.iterdir())


def test_a_purge_follows_no_symbolic_link_and_goes_on_past_what_it_cannot_delete(front):
    """A table whose folder became a link to another table's deletes nothing; a link or a
    folder among a table's files is left, and the files beside it are still deleted."""
    new_table(front, "purge_links", "victim")
    theirs = all_files(front.warehouse / "purge_links" / "victim")
    alias = new_table(front, "purge_links", "alias")
    folder = front.warehouse / "purge_links"
    shutil.copytree(folder / "alias", folder / "victim", dirs_exist_ok=True)
    shutil.rmtree(folder / "alias")
    os.symlink(folder / "victim", folder / "alias")
    copied = all_files(folder / "victim")
    with api(front, "operator") as c:
        dropped = c.delete(
            "/v1/namespaces/purge_links/tables/alias", params={"purgeRequested": "true"}
        )
    assert dropped.status_code == 204, dropped.text
    purged(front, "purge_links.alias", "left")
    assert theirs < copied == all_files(folder / "victim")
    ids = rest(front).load_table("purge_links.victim").scan().to_arrow()["id"].to_pylist()
    assert sorted(ids) == [0, 1, 2, 10, 11, 12]
    assert alias.metadata.location == f"{front.warehouse.as_uri()}/purge_links/alias"

    odd = new_table(front, "purge_odd")
    data = sorted(
        Path(task.file.file_path.removeprefix("file://")) for task in odd.scan().plan_files()
    )
    keep = front.folder / "keep.parquet"
    shutil.copy(data[1], keep)
    data[0].unlink()
    data[0].mkdir()  # a folder where a data file was
    data[1].unlink()
    os.symlink(keep, data[1])  # a link where a data file was
    with api(front, "operator") as c:
        dropped = c.delete("/v1/namespaces/purge_odd/tables/t", params={"purgeRequested": "true"})
    assert dropped.status_code == 204, dropped.text
    purged(front, "purge_odd.t", "left 2 files")
    assert data[0].is_dir() and data[1].is_symlink() and keep.exists()
    left = {p for p in all_files(front.warehouse / "purge_odd") if not p.is_symlink()}
    assert not left, left  # every metadata file and manifest was deleted all the same
    log = (front.folder / f"service-{front.url.rsplit(':', 1)[1]}.log").read_text()
    assert "purge of purge_links.alias deletes nothing" in log


def test_a_purge_goes_on_past_a_manifest_that_is_gone(front):
    """A manifest deleted by hand names nothing more; the drop is answered, and every other
    file the table names is deleted."""
    table = new_table(front, "purge_gone")
    gone = table.current_snapshot().manifests(table.io)[0].manifest_path
    Path(gone.removeprefix("file://")).unlink()
    with api(front, "operator") as c:
        dropped = c.delete("/v1/namespaces/purge_gone/tables/t", params={"purgeRequested": "true"})
    assert dropped.status_code == 204, dropped.text
    metadata = front.warehouse / "purge_gone" / "t" / "metadata"
    wait_until(lambda: not all_files(metadata), "the purge after the answer")
    log = (front.folder / f"service-{front.url.rsplit(':', 1)[1]}.log").read_text()
    assert f"{gone} is gone: the files it names are not purged" in log


def test_a_purge_logs_and_leaves_a_file_it_cannot_delete(front, monkeypatch):
    table = new_table(front, "purge_fail")
    stuck = table.metadata.current_snapshot().manifest_list
    real_delete = FsspecFileIO.delete

    def delete(io: FsspecFileIO, location: str) -> None:
        if location == stuck:
            raise PermissionError(13, "Permission denied", location)
        real_delete(io, location)

    monkeypatch.setattr(FsspecFileIO, "delete", delete)
    pointers = Pointers(CATALOG, create_engine("sqlite://"), warehouse=front.warehouse.as_uri())
    deleted, left = pointers.purge(pointers.purge_plan(table))
    assert left == [stuck] and deleted > 0
    assert {p.as_uri() for p in all_files(front.warehouse / "purge_fail")} == {stuck}


def test_locations_follow_symbolic_links_on_local_storage(tmp_path):
    warehouse = tmp_path / "wh"
    (warehouse / "db" / "events" / "data").mkdir(parents=True)
    os.symlink(warehouse / "db" / "events", warehouse / "db" / "alias")
    linked_root = tmp_path / "root-link"
    os.symlink(warehouse, linked_root)  # a warehouse reached through a link is still one
    base = warehouse.as_uri()
    (warehouse / "db" / "t").mkdir()
    os.symlink(warehouse / "db" / "events" / "data", warehouse / "db" / "t" / "data")
    # inside only when inside as written and as resolved
    assert not locations.inside(f"{base}/db/t/data/f.parquet", f"{base}/db/t")
    assert not locations.inside(f"{base}/db/alias/data/f.parquet", f"{base}/db/events")
    assert locations.inside(f"{base}/db/events/data/new.parquet", f"{base}/db/events")
    # a folder that is itself a link holds what its target holds: `through_link` tells
    assert locations.inside(f"{base}/db/alias/data/f.parquet", f"{base}/db/alias")
    assert locations.through_link(f"{base}/db/alias/x", base)
    assert not locations.through_link(f"{base}/db/events/not/yet", base)
    assert not locations.through_link(f"{linked_root.as_uri()}/db/new", linked_root.as_uri())
    assert not locations.through_link("s3://b/wh/db/alias", "s3://b/wh")
    with pytest.raises(InvalidRequest, match="symbolic link"):
        locations.place(base, ("db",), f"{base}/db/alias/inner")
    placed = locations.place(linked_root.as_uri(), ("db",), f"{linked_root.as_uri()}/db/new")
    assert placed == f"{linked_root.as_uri()}/db/new"


def test_a_name_differing_only_in_case_is_the_same_table(front):
    """lakelock names tables in lower case (leases, switch, events): two tables whose names
    differ in case only would share them, whatever the database's collation allows."""
    catalog = rest(front)
    catalog.create_namespace("case_ns")
    catalog.create_table("case_ns.events", SCHEMA)
    catalog.create_table("case_ns.other", SCHEMA)
    warehouse = front.warehouse.as_uri()
    with api(front) as c:
        made = c.post(
            "/v1/namespaces/case_ns/tables",
            json=create_body("Events", location=f"{warehouse}/case_ns/elsewhere"),
        )
    assert made.status_code == 409, made.text
    assert made.json()["error"]["type"] == "AlreadyExistsException"
    staged = catalog.create_table_transaction(
        "case_ns.Later", SCHEMA, location=f"{warehouse}/case_ns/later_elsewhere"
    )
    catalog.create_table("case_ns.later", SCHEMA)  # while the other is staged
    with pytest.raises(CommitFailedException):
        staged.commit_transaction()
    renamed = rename(front, ("case_ns", "other"), ("case_ns", "EVENTS"))
    assert renamed.status_code == 409, renamed.text
    names = sorted(t[1] for t in catalog.list_tables("case_ns"))
    assert names == ["events", "later", "other"]
    assert not (front.warehouse / "case_ns" / "elsewhere").exists()
    if front.db_url.startswith("sqlite"):  # MariaDB's collation refuses these already
        assert "differs in more than letter case" in made.json()["detail"]
        assert "letter case" in renamed.json()["detail"]


# -- what a commit is -------------------------------------------------------------------------


def test_a_rewrite_labelled_overwrite_is_maintenance(front):
    table = new_table(front, "label")
    table.append(rows(2, date(2024, 6, 20), start=20))
    table = rest(front).load_table(table.name())
    before = all_files(front.warehouse)
    disguised = post_commit(front, table, rewrite(table, date(2024, 6, 20), "overwrite", {}))
    assert disguised.status_code == 403 and disguised.json()["reason"] == "no-lease"
    assert pointer(front, table) == table.metadata_location
    assert {p for p in all_files(front.warehouse) if p.name.endswith(".metadata.json")} == {
        p for p in before if p.name.endswith(".metadata.json")
    }
    lease = maintenance_lease(front, table, partitions=["dt=2024-06-20"])
    named = {"lakelock.lease-id": lease["lease_id"], "lakelock.token": str(lease["token"])}
    passed = post_commit(front, table, rewrite(table, date(2024, 6, 20), "overwrite", named))
    assert passed.status_code == 200, passed.text


def test_a_new_manifest_naming_another_snapshot_is_refused(front):
    table = new_table(front, "forged")
    table.append(rows(2, date(2024, 6, 20), start=20))
    table = rest(front).load_table(table.name())
    body = rewrite(table, date(2024, 6, 20), "overwrite", {})
    snapshot = next(u for u in body["updates"] if u["action"] == "add-snapshot")["snapshot"]
    parent = table.metadata.current_snapshot()
    listed = list(read_manifest_list(table.io.new_input(snapshot["manifest-list"])))
    old = {m.manifest_path for m in parent.manifests(table.io)}
    for m in listed:
        if m.manifest_path not in old:
            m._data[ADDED_SNAPSHOT_ID] = parent.snapshot_id
    forged = snapshot["manifest-list"].replace(".avro", "-forged.avro")
    with write_manifest_list(
        2,
        table.io.new_output(forged),
        snapshot["snapshot-id"],
        parent.snapshot_id,
        snapshot["sequence-number"],
        "deflate",
    ) as writer:
        writer.add_manifests(listed)
    snapshot["manifest-list"] = forged
    refused(post_commit(front, table, body), "as added by snapshot")
    assert pointer(front, table) == table.metadata_location


@pytest.mark.parametrize("where", ["outside", "missing", "garbage"])
def test_a_manifest_list_outside_the_table_or_unreadable_is_the_clients_mistake(
    front, tmp_path, where
):
    """The service reads only files inside the table's folder, and a file there that is no
    manifest list is a 400, not a fault of the service."""
    table = new_table(front, f"listed_{where}")
    body = rewrite(table, date(2024, 6, 20), "append", {})
    snapshot = next(u for u in body["updates"] if u["action"] == "add-snapshot")["snapshot"]
    folder = snapshot["manifest-list"].rsplit("/", 1)[0]
    if where == "outside":
        elsewhere = tmp_path / "elsewhere.avro"
        elsewhere.write_bytes(Path(snapshot["manifest-list"].removeprefix("file://")).read_bytes())
        snapshot["manifest-list"], words = elsewhere.as_uri(), ("outside the table's folder",)
    elif where == "missing":
        snapshot["manifest-list"], words = f"{folder}/snap-none.avro", ("does not exist",)
    else:
        garbage = Path(folder.removeprefix("file://")) / "snap-garbage.avro"
        garbage.write_bytes(b"not avro at all")
        snapshot["manifest-list"], words = garbage.as_uri(), ("is not an Avro file Iceberg writes",)
    refused(post_commit(front, table, body), *words)
    assert pointer(front, table) == table.metadata_location


def test_counts_come_from_the_manifests_never_from_the_summary(front):
    table = new_table(front, "counts")
    name = f"{CATALOG}.counts.t"
    with httpx.Client(base_url=front.url, headers=auth("job"), timeout=30) as c:
        c.put(
            f"/v1/tables/{name}/debt",
            json={
                "data_files": 2,
                "small_files": 2,
                "delete_files": 0,
                "partitions_over_target": 0,
            },
        ).raise_for_status()
    current = table.metadata.current_snapshot()
    snapshot_id = random.randrange(1, 2**62)
    lying = {
        "operation": "append",
        "added-data-files": "-1000",
        "deleted-data-files": "1000",
        "removed-delete-files": "50",
        "added-records": "-7",
    }
    body = {
        "requirements": [],
        "updates": [
            {
                "action": "add-snapshot",
                "snapshot": {
                    "snapshot-id": snapshot_id,
                    "parent-snapshot-id": current.snapshot_id,
                    "sequence-number": table.metadata.last_sequence_number + 1,
                    "timestamp-ms": int(time.time() * 1000),
                    "manifest-list": current.manifest_list,
                    "summary": lying,
                    "schema-id": current.schema_id,
                },
            },
            {
                "action": "set-snapshot-ref",
                "ref-name": "main",
                "type": "branch",
                "snapshot-id": snapshot_id,
            },
        ],
    }
    assert post_commit(front, table, body).status_code == 200
    table = rest(front).load_table(table.name())
    table.append(rows(1, date(2024, 6, 22), start=90))
    with httpx.Client(base_url=front.url, headers=auth("operator"), timeout=30) as c:
        debt = c.get(f"/v1/tables/{name}").json()["debt"]
        found = c.get("/v1/events", params={"table": name, "limit": 10}).json()["events"]
    assert (debt["data_files"], debt["small_files"], debt["delete_files"]) == (3, 3, 0)
    lied = next(e for e in found if e["detail"].get("snapshot_id") == snapshot_id)
    assert lied["kind"] == "data"
    assert not {k for k in lied["detail"] if k.endswith(("-files", "-records"))}
    appended = found[0]["detail"]
    assert (appended["added-data-files"], appended["added-records"]) == (1, 1)


def test_a_merge_on_read_commit_and_an_append_stay_data(front):
    table = new_table(front, "mor")
    maintenance_lease(front, table, partitions=["dt=2024-06-21"])  # the partitions are read
    producer = _FastAppendFiles(
        operation=Operation.OVERWRITE, transaction=table.transaction(), io=table.io
    )
    for f in _dataframe_to_data_files(
        table.metadata,
        rows(1, date(2024, 6, 20), start=7),
        table.io,
        write_uuid=producer.commit_uuid,
    ):
        producer.append_data_file(f)
        deletes = table.metadata.location + "/data/dt=2024-06-20/deletes.parquet"
        pq.write_table(
            pa.table({"file_path": [f.file_path], "pos": pa.array([0], pa.int64())}),
            deletes.removeprefix("file://"),
        )
        producer.append_data_file(
            DataFile.from_args(
                content=DataFileContent.POSITION_DELETES,
                file_path=deletes,
                file_format=FileFormat.PARQUET,
                partition=Record(f.partition[0]),
                record_count=1,
                file_size_in_bytes=100,
            )
        )
    passed = post_commit(front, table, producer_body(producer))
    assert passed.status_code == 200, passed.text
    with httpx.Client(base_url=front.url, headers=auth("operator"), timeout=30) as c:
        event = c.get("/v1/events", params={"table": f"{CATALOG}.mor.t", "limit": 1}).json()[
            "events"
        ][0]
    assert (event["kind"], event["detail"]["partitions"]) == ("data", ["dt=2024-06-20"])
    assert event["detail"]["added-delete-files"] == 1


@pytest.mark.parametrize(
    ("label", "written", "kind"),
    [
        (
            "overwrite",
            Written(added_data=1, deleted_data=2, added_records=5, deleted_records=5),
            "maintenance",
        ),
        ("replace", Written(), "maintenance"),
        ("delete", Written(removed_deletes=3), "maintenance"),
        ("append", Written(added_data=1, added_records=3, older_sequence=True), "maintenance"),
        ("append", Written(new_manifests=1), "maintenance"),
        (
            "overwrite",
            Written(added_data=1, deleted_data=1, added_records=4, deleted_records=5),
            "data",
        ),
        ("overwrite", Written(added_data=1, added_deletes=1, added_records=1), "data"),
        ("delete", Written(added_deletes=1), "data"),
        ("append", Written(added_data=1, added_records=1), "data"),
        ("overwrite", Written(deleted_data=1, deleted_records=2), "data"),
        ("append", Written(), "data"),
    ],
)
def test_what_a_snapshot_is_comes_from_its_entries(label, written, kind):
    from pyiceberg.table.snapshots import Snapshot, Summary

    snapshot = Snapshot(
        snapshot_id=1,
        sequence_number=2,
        timestamp_ms=0,
        manifest_list="file:///l.avro",
        summary=Summary(Operation(label)),
    )
    assert changes._snapshot_kind(snapshot, written) == kind


# -- caps -------------------------------------------------------------------------------------


def test_sizes_past_the_caps_are_refused_and_say_the_cap(front):
    table = new_table(front, "caps")
    before = all_files(front.warehouse)
    wide = {f"k{i}": "v" for i in range(21)}
    refused(post_commit(front, table, set_properties(wide)), "LAKELOCK_CATALOG_MAX_PROPERTIES")
    refused(
        post_commit(front, table, set_properties({"k": "v" * 301})),
        "LAKELOCK_CATALOG_MAX_PROPERTY_CHARS",
    )
    refused(post_commit(front, table, set_properties({"k\x00": "v"})), "printable")
    fields = [
        {"id": i, "name": f"column_with_a_long_name_{i}", "type": "string", "required": False}
        for i in range(1, 4000)
    ]
    big = {
        "requirements": [],
        "updates": [
            {"action": "add-schema", "schema": {"type": "struct", "schema-id": 1, "fields": fields}}
        ],
    }
    refused(post_commit(front, table, big), "LAKELOCK_CATALOG_MAX_METADATA_BYTES")
    with api(front) as c:
        huge = c.post(
            "/v1/namespaces/caps/tables",
            json={"name": "wide", "schema": {"type": "struct", "schema-id": 0, "fields": fields}},
        )
        refused(huge, "LAKELOCK_CATALOG_MAX_METADATA_BYTES")
        refused(
            c.post("/v1/namespaces", json={"namespace": ["x" * 65]}),
            "LAKELOCK_CATALOG_MAX_NAME_CHARS",
        )
        refused(c.post("/v1/namespaces", json={"namespace": ["a\nb"]}), "printable")
        refused(
            c.post("/v1/namespaces", json={"namespace": ["nsp"], "properties": {"k": "v" * 1001}}),
            "LAKELOCK_CATALOG_MAX_PROPERTY_CHARS",
        )
        refused(
            c.post("/v1/namespaces", json={"namespace": ["nsq"], "properties": wide}),
            "LAKELOCK_CATALOG_MAX_PROPERTIES",
        )
        assert c.head("/v1/namespaces/nsp").status_code == 404
    with api(front, "operator") as c:
        refused(
            c.post("/v1/namespaces/caps/properties", json={"updates": wide}),
            "LAKELOCK_CATALOG_MAX_PROPERTIES",
        )
    unchanged(front, table, before)
