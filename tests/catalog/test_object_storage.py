"""The catalog front on an S3 warehouse (docs/catalogs.md, "Object storage"), against the
project's S3 server (demo.s3) of its own, which these tests count the requests of, stop and
start again.

What a user of lakelock on S3 would notice: a client given only the catalog's URI reads and
writes the tables (the endpoint, region and path style come from `/v1/config`, never a key);
locations on `s3://` and `s3a://` are one storage; a purge answers at once, then deletes every
object of the table's location in batches, markers included, and nothing of another table's;
a storage that is down is a 503 naming the URI, with nothing applied, the connection kept,
`/readyz` failing after one attempt (the catalog's own calls make three), and a service that
cannot list its warehouse does not start; a commit costs a handful of requests, and a commit
tried again reads nothing twice.
"""

from __future__ import annotations

import http.server
import os
import subprocess
import sys
import threading
from collections import Counter
from collections.abc import Iterator
from datetime import date
from pathlib import Path
from typing import Any

import httpx
import pytest
from pyiceberg.catalog.rest import RestCatalog
from pyiceberg.catalog.sql import SqlCatalog

from demo.s3 import ENV, REGION, LocalS3
from service.catalog.storage import S3Access, Storage
from service.wire.errors import StorageFault
from testkit import free_port
from tests.catalog.test_front import SCHEMA, SPEC, rows
from tests.conftest import TOKENS, Warehouse, auth, start_server
from tests.support.helpers import wait_until

pytestmark = pytest.mark.s3  # the project's S3 server (demo.s3), a JVM
BUDGET_S = 60  # tests/support/budget.py: an S3 server of its own, stopped and started again

CATALOG = "lakelock"


@pytest.fixture(scope="module")
def s3(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalS3]:
    """A server of this module's own: counted, and stopped by the fault tests."""
    server = LocalS3.start(tmp_path_factory.mktemp("s3-counted"), count=True)
    yield server
    server.stop()


@pytest.fixture(scope="module")
def front(s3: LocalS3, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    from service.lock import migrate

    folder = tmp_path_factory.mktemp("front-s3")
    db_url = f"sqlite:///{folder / 'lakelock.db'}"
    migrate.upgrade(db_url)
    store = Warehouse(s3.warehouse("wh"), s3)
    server = start_server(
        db_url,
        folder,
        LAKELOCK_CATALOG_WAREHOUSE=store.uri,
        LAKELOCK_CATALOG_HOLD_WAIT_S="0",
        **s3.settings,
        **s3.env,
    )
    server.store = store  # type: ignore[attr-defined]
    server.db_url = db_url  # type: ignore[misc]
    server.folder = folder  # type: ignore[attr-defined]
    yield server
    server.stop()


class Counted(RestCatalog):
    """pyiceberg's REST catalog, counting the S3 requests the service makes for each commit
    (the client itself sends none while its commit is under way)."""

    def __init__(self, front: Any, s3: LocalS3) -> None:
        super().__init__(CATALOG, uri=f"{front.url}/iceberg", token=TOKENS["job"])
        self.s3 = s3
        self.commits: list[Counter[str]] = []

    def commit_table(self, table: Any, requirements: Any, updates: Any) -> Any:
        before = self.s3.requests()
        try:
            return super().commit_table(table, requirements, updates)
        finally:
            self.commits.append(self.s3.requests() - before)


def catalog(front: Any) -> RestCatalog:
    """A client given the catalog's URI and token only: where S3 is comes from the catalog,
    its keys from the environment (the s3_server fixture's, the standard AWS variables)."""
    return RestCatalog(CATALOG, uri=f"{front.url}/iceberg", token=TOKENS["job"])


def new_table(client: RestCatalog, namespace: str, name: str = "t", **create: Any) -> Any:
    if (namespace,) not in client.list_namespaces():
        client.create_namespace(namespace)
    table = client.create_table(f"{namespace}.{name}", SCHEMA, partition_spec=SPEC, **create)
    table.append(rows(3, date(2024, 6, 20)))
    table.append(rows(3, date(2024, 6, 21), start=10))
    return client.load_table(f"{namespace}.{name}")


def ids(table: Any) -> list[int]:
    return sorted(table.scan().to_arrow()["id"].to_pylist())


def test_a_client_given_the_catalogs_uri_alone_reads_and_writes_tables_on_s3(front, s3):
    with httpx.Client(base_url=f"{front.url}/iceberg", headers=auth("reader")) as c:
        config = c.get("/v1/config").json()
    assert config["defaults"] == {
        "s3.endpoint": s3.endpoint,
        "s3.path-style-access": "true",
        "client.region": REGION,
        "s3.region": REGION,
    }
    assert not any("key" in k or "secret" in k or "token" in k for k in config["defaults"])
    table = new_table(catalog(front), "plain")
    assert table.metadata.location == f"{front.store.uri}/plain/t"
    objects = front.store.objects("plain/t")
    assert sum(uri.endswith(".parquet") for uri in objects) == 2
    assert sum(uri.endswith(".metadata.json") for uri in objects) == 3
    # an independent reader: pyiceberg's SQL catalog over the database, pyarrow's S3 access
    direct = SqlCatalog(
        CATALOG, uri=front.db_url, warehouse=front.store.uri, **front.store.client_properties()
    )
    assert ids(direct.load_table("plain.t")) == [0, 1, 2, 10, 11, 12]


def test_s3_and_s3a_are_one_storage_and_a_table_stays_in_its_folder(front):
    client = catalog(front)
    client.create_namespace("where")
    warehouse = front.store.uri.removeprefix("s3://")
    table = client.create_table("where.a", SCHEMA, location=f"s3a://{warehouse}/where/custom")
    assert table.metadata.location == f"s3a://{warehouse}/where/custom"
    refusals = {
        "another bucket": "s3://elsewhere/wh/where/b",
        "outside the warehouse": f"s3://{warehouse}-other/where/b",
        "the same folder as s3": f"s3://{warehouse}/where/custom",
        "inside it": f"s3://{warehouse}/where/custom/inner",
    }
    with httpx.Client(base_url=f"{front.url}/iceberg", headers=auth("job")) as c:
        for what, location in refusals.items():
            made = c.post(
                "/v1/namespaces/where/tables",
                json={"name": "b", "schema": json_schema(), "location": location},
            )
            assert made.status_code == 400, (what, made.text)
    assert client.list_tables("where") == [("where", "a")]


def json_schema() -> Any:
    import json

    return json.loads(SCHEMA.model_dump_json())


def test_a_purge_deletes_every_object_of_the_table_in_batches_and_nothing_else(front, s3):
    client = catalog(front)
    table = new_table(client, "purge", "t")
    neighbour = new_table(client, "purge", "t2")  # its prefix starts with the other's
    location = table.metadata.location
    bucket, _, key = location.removeprefix("s3://").partition("/")
    fs = s3.client()
    # what other tools leave: folder markers, an orphan file, a key beside the table's folder
    for extra in (f"{key}/data/", f"{key}/", f"{key}/data/orphan.parquet", f"{key}.txt"):
        fs.call_s3("put_object", Bucket=bucket, Key=extra, Body=b"")
    owned = front.store.objects(location)
    assert len(owned) > 10 and f"s3://{bucket}/{key}/data/" in owned
    others = front.store.objects() - owned
    before = s3.requests()
    with httpx.Client(base_url=f"{front.url}/iceberg", headers=auth("operator")) as c:
        dropped = c.delete("/v1/namespaces/purge/tables/t", params={"purgeRequested": "true"})
    assert dropped.status_code == 204, dropped.text
    wait_until(lambda: not front.store.objects(location), "the purge after the answer")
    assert front.store.objects() == others  # the neighbour's files, and the key beside
    assert (s3.requests() - before)["DELETE"] == 1  # one batch: fewer than 1,000 keys
    assert ids(client.load_table("purge.t2")) == ids(neighbour) == [0, 1, 2, 10, 11, 12]


def test_a_commit_costs_a_few_requests_and_a_commit_tried_again_reads_nothing_twice(front, s3):
    counted = Counted(front, s3)
    counted.create_namespace("cost")
    table = counted.create_table("cost.t", SCHEMA, partition_spec=SPEC)
    counted.commits.clear()
    for n in range(4):
        table.append(rows(2, date(2024, 6, 20 + n), start=10 * n))
    appends = counted.commits[1:]  # the first reads the create's list: none before it
    # the front reads the new manifest list and its one new manifest, and writes the metadata
    # file (the parent's list and metadata are those of its own last commit, kept)
    for cost in appends:
        assert cost == Counter({"GET": 2, "PUT": 1}), appends
    # a commit sent twice (a client's retry after a lost answer): the second is a 409, and
    # reads no file the first read
    body = replayed_commit(table)
    before = s3.requests()
    with httpx.Client(base_url=f"{front.url}/iceberg", headers=auth("job")) as c:
        first = c.post("/v1/namespaces/cost/tables/t", json=body)
        middle = s3.requests()
        again = c.post("/v1/namespaces/cost/tables/t", json=body)
    assert first.status_code == 200 and again.status_code == 409, (first.text, again.text)
    assert (middle - before)["GET"] == 2 and not (s3.requests() - middle)


def replayed_commit(table: Any) -> dict[str, Any]:
    """The body of an append as pyiceberg sends it, with its files written, not sent."""
    sent: dict[str, Any] = {}

    class Keep(RestCatalog):
        def commit_table(self, table: Any, requirements: Any, updates: Any) -> Any:
            sent["requirements"] = [r.model_dump(by_alias=True) for r in requirements]
            sent["updates"] = [u.model_dump(by_alias=True, exclude_none=True) for u in updates]
            raise RuntimeError("kept, not sent")

    keeper = Keep(CATALOG, uri=table.catalog.uri, token=TOKENS["job"])
    with pytest.raises(RuntimeError, match="kept"):
        keeper.load_table(table.name()).append(rows(1, date(2024, 7, 1), start=99))
    import json

    return json.loads(json.dumps(sent, default=str))


def test_a_storage_that_is_down_is_a_503_naming_it_and_nothing_is_applied(front, s3):
    client = catalog(front)
    table = new_table(client, "down")
    pointer = table.metadata_location
    body = replayed_commit(table)
    s3.stop()
    try:
        with httpx.Client(base_url=front.url, headers=auth("job"), timeout=60) as c:
            wait_until(lambda: c.get("/readyz").status_code == 503, "not ready")
            ready = c.get("/readyz")
            assert front.store.uri in ready.json()["detail"]
            committed = c.post("/iceberg/v1/namespaces/down/tables/t", json=body)
            assert committed.status_code == 503, committed.text
            problem = committed.json()
            assert problem["error"]["type"] == "ServiceUnavailableException"
            assert "nothing was applied" in problem["detail"] and "s3://" in problem["detail"]
            assert int(committed.headers["Retry-After"]) >= 1
            # the same connection answers the next call: no 500 and reset
            assert c.get("/healthz").status_code == 200
            listed = c.get("/iceberg/v1/namespaces/down/tables")
            assert listed.status_code == 200  # the database alone answers that
    finally:
        restarted = LocalS3.start(s3.folder, port=s3.port, count=True)
        s3.process, s3.log = restarted.process, restarted.log
    assert client.load_table("down.t").metadata_location == pointer  # nothing applied
    with httpx.Client(base_url=front.url, headers=auth("job")) as c:
        # the readiness answer stands a few seconds (Storage.ready)
        wait_until(lambda: c.get("/readyz").status_code == 200, "ready again")
        assert c.post("/iceberg/v1/namespaces/down/tables/t", json=body).status_code == 200
    assert ids(client.load_table("down.t")) == [0, 1, 2, 10, 11, 12, 99]


@pytest.mark.parametrize("where", ["a closed port", "no such bucket"])
def test_a_service_that_cannot_list_its_warehouse_does_not_start(s3, tmp_path, where):
    env = {**s3.settings, **s3.env}
    warehouse = "s3://no-such-bucket/wh" if where == "no such bucket" else s3.warehouse("wh")
    if where == "a closed port":
        env["LAKELOCK_CATALOG_S3_ENDPOINT"] = "http://127.0.0.1:9"
    started = subprocess.run(
        [sys.executable, "-m", "service", "--migrate"],
        env={
            **os.environ,
            **env,
            "LAKELOCK_DATABASE_URL": f"sqlite:///{tmp_path / 'lakelock.db'}",
            "LAKELOCK_AUTH": "off",
            "LAKELOCK_PORT": str(free_port()),
            "LAKELOCK_CATALOG_WAREHOUSE": warehouse,
            "LAKELOCK_LOG_FORMAT": "text",
        },
        cwd=Path(__file__).resolve().parents[2],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert started.returncode != 0
    said = started.stdout + started.stderr
    expected = f"the warehouse's storage failed to list the warehouse {warehouse}"
    assert f"not started: LAKELOCK_CATALOG_WAREHOUSE: {expected}" in said, said[-3000:]


def test_no_table_is_placed_in_a_folder_that_holds_files(front):
    """A table dropped without purge leaves its files: a new table of its name gets a folder
    of its own, and no table is created at, or moved to, a folder that holds files (a purge
    of it would delete them)."""
    client = catalog(front)
    old = new_table(client, "placed", "t")
    folder = old.metadata.location
    with httpx.Client(base_url=f"{front.url}/iceberg", headers=auth("operator")) as c:
        assert c.delete("/v1/namespaces/placed/tables/t").status_code == 204
    again = client.create_table("placed.t", SCHEMA)
    assert again.metadata.location.startswith(f"{folder}-")
    with httpx.Client(base_url=f"{front.url}/iceberg", headers=auth("job")) as c:
        made = c.post(
            "/v1/namespaces/placed/tables",
            json={"name": "u", "schema": json_schema(), "location": folder},
        )
        assert made.status_code == 400 and "holds files already" in made.json()["detail"]
        moved = c.post(
            "/v1/namespaces/placed/tables/t",
            json={"requirements": [], "updates": [{"action": "set-location", "location": folder}]},
        )
        assert moved.status_code == 400 and "holds files already" in moved.json()["detail"]
    assert front.store.objects(folder)  # the dropped table's files, untouched


class Failing(http.server.ThreadingHTTPServer):
    """An S3 endpoint that answers every request 503 SlowDown, counting them."""

    def __init__(self) -> None:
        self.requests = 0
        server = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                server.requests += 1
                body = b"<Error><Code>SlowDown</Code><Message>Reduce your rate</Message></Error>"
                self.send_response(503)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: Any) -> None:
                pass

        super().__init__(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.serve_forever, daemon=True).start()


def test_a_readiness_probe_asks_a_failing_storage_once_the_start_up_check_retries(monkeypatch):
    """A load balancer's probe must get its answer within the probe's timeout: one attempt,
    its count of failed probes being the retry. The start-up check and the catalog's calls
    ride out a blip with botocore's three attempts."""
    for name, value in ENV.items():
        monkeypatch.setenv(name, value)
    endpoint = Failing()
    try:
        address = f"http://127.0.0.1:{endpoint.server_address[1]}"
        storage = Storage("s3://lake/wh", S3Access(address, REGION, path_style=True))
        with pytest.raises(StorageFault, match="failed to list the warehouse s3://lake/wh"):
            storage.ready()
        assert endpoint.requests == 1
        with pytest.raises(StorageFault):  # the answer stands a few seconds: no new attempt
            storage.ready()
        assert endpoint.requests == 1
        with pytest.raises(StorageFault, match="failed to list the warehouse"):
            storage.check()
        assert endpoint.requests == 1 + 3
    finally:
        endpoint.shutdown()
        endpoint.server_close()
