"""The fence judges a commit by what it changes in the table, not by what it says it did
(docs/catalog-front.md, docs/design.md §6), against a real service on SQLite, its warehouse on
local files and on S3.

A compactor holds partition p=2 under a maintenance lease; a foreign writer then tries, with
hand-made manifests, to change p=2 without naming it: a manifest list that drops p=2's
manifest, a branch moved back to an older snapshot or removed, a file brought in as
`EXISTING`, a snapshot that declares an older parent than the branch's head. Each is held
(429) and the table stays as it was; an honest commit elsewhere passes. Files a commit names
that the service must not read (a FIFO, bytes that are no Avro) and tokens no lease can have
are the client's 400s.
"""

from __future__ import annotations

import json
import os
import random
import uuid
from typing import Any

import httpx
import pyarrow as pa
import pytest
from pyiceberg.catalog.rest import RestCatalog
from pyiceberg.manifest import (
    DataFile,
    DataFileContent,
    ManifestContent,
    ManifestEntry,
    ManifestEntryStatus,
    ManifestFile,
    ManifestWriterV2,
)
from pyiceberg.partitioning import PartitionField, PartitionSpec
from pyiceberg.schema import Schema
from pyiceberg.transforms import IdentityTransform
from pyiceberg.types import LongType, NestedField, StringType

from testkit.commits import data_file, entry, manifest_list, new_manifest, snapshot_commit
from tests.conftest import FRONTS, TOKENS, auth, front_fixture

CATALOG = "lakelock"
SCHEMA = Schema(
    NestedField(1, "id", LongType(), required=False),
    NestedField(2, "p", StringType(), required=False),
)
SPEC = PartitionSpec(PartitionField(2, 1000, IdentityTransform(), "p"))


front = front_fixture("fence-content", FRONTS)


def rest(front: Any) -> RestCatalog:
    return RestCatalog(CATALOG, uri=f"{front.url}/iceberg", token=TOKENS["job"])


def held_table(front: Any, namespace: str) -> Any:
    """A table with a file in p=1, p=2 and p=3 (one append each), and a live maintenance lease
    on p=2."""
    catalog = rest(front)
    catalog.create_namespace(namespace)
    table = catalog.create_table(f"{namespace}.t", SCHEMA, partition_spec=SPEC)
    for n, p in enumerate(("1", "2", "3")):
        table.append(pa.table({"id": pa.array([n], pa.int64()), "p": [p]}))
    with httpx.Client(base_url=front.url, headers=auth("job"), timeout=30) as api:
        granted = api.post(
            f"/v1/tables/{CATALOG}.{namespace}.t/maintenance-lease",
            json={"holder": "compactor-1", "ttl_s": 120, "partitions": ["p=2"]},
        )
    assert granted.status_code == 201, granted.text
    return catalog.load_table(f"{namespace}.t")


def manifest_of(table: Any, partition: str) -> ManifestFile:
    """The current snapshot's manifest that holds partition `partition`."""
    for manifest in table.current_snapshot().manifests(table.io):
        files = manifest.fetch_manifest_entry(table.io)
        if any(e.data_file.partition[0] == partition for e in files):
            return manifest
    raise AssertionError(f"no manifest holds p={partition}")


def post(front: Any, table: Any, body: dict[str, Any]) -> httpx.Response:
    namespace, name = table.name()
    with httpx.Client(base_url=f"{front.url}/iceberg", headers=auth("job"), timeout=30) as c:
        return c.post(f"/v1/namespaces/{namespace}/tables/{name}", json=body)


def assert_held(front: Any, table: Any, answer: httpx.Response) -> None:
    assert answer.status_code == 429, answer.text
    assert answer.json()["reason"] == "held"
    assert rest(front).load_table(table.name()).metadata_location == table.metadata_location


def last_commit(front: Any) -> dict[str, Any]:
    """The newest `catalog.commit` event."""
    with httpx.Client(base_url=front.url, headers=auth("reader")) as api:
        answer = api.get("/v1/events", params={"event": "catalog.commit", "limit": 1})
    (event,) = answer.json()["events"]
    return event


def ids() -> int:
    return random.randrange(1, 2**62)


def test_a_manifest_list_that_drops_a_held_partitions_manifest_is_held(front):
    table = held_table(front, "dropped")
    head = table.current_snapshot()
    gone = manifest_of(table, "2").manifest_path
    kept = [m for m in head.manifests(table.io) if m.manifest_path != gone]
    snapshot_id = ids()
    listed = manifest_list(table, snapshot_id, head.snapshot_id, 9, kept)
    answer = post(
        front, table, snapshot_commit(table, snapshot_id, head.snapshot_id, listed, "delete")
    )
    assert_held(front, table, answer)


def test_a_branch_moved_to_an_older_snapshot_or_removed_is_held(front):
    table = held_table(front, "moved")
    first = table.metadata.snapshots[0].snapshot_id
    head = table.current_snapshot().snapshot_id
    back = {
        "requirements": [{"type": "assert-ref-snapshot-id", "ref": "main", "snapshot-id": head}],
        "updates": [
            {
                "action": "set-snapshot-ref",
                "ref-name": "main",
                "type": "branch",
                "snapshot-id": first,
            }
        ],
    }
    assert_held(front, table, post(front, table, back))
    gone = {"requirements": [], "updates": [{"action": "remove-snapshot-ref", "ref-name": "main"}]}
    assert_held(front, table, post(front, table, gone))
    # a tag is no branch: it changes what no reader of the table reads
    tag = {
        "requirements": [],
        "updates": [
            {"action": "set-snapshot-ref", "ref-name": "v1", "type": "tag", "snapshot-id": first}
        ],
    }
    assert post(front, table, tag).status_code == 200


def test_a_file_brought_in_as_existing_counts_as_added(front):
    table = held_table(front, "smuggled")
    head = table.current_snapshot()
    snapshot_id = ids()
    smuggled = entry(
        snapshot_id, data_file(table, "2", "smuggled"), ManifestEntryStatus.EXISTING, 1
    )
    honest = entry(snapshot_id, data_file(table, "9", "honest"), ManifestEntryStatus.ADDED)
    manifests = [new_manifest(table, snapshot_id, [smuggled, honest]), *head.manifests(table.io)]
    listed = manifest_list(table, snapshot_id, head.snapshot_id, 9, manifests)
    answer = post(
        front, table, snapshot_commit(table, snapshot_id, head.snapshot_id, listed, "append")
    )
    # a file no dropped manifest held, with an older sequence number: a rewrite's signature,
    # which needs a maintenance lease (counted as what it is, an added file in p=2)
    assert answer.status_code == 403 and answer.json()["reason"] == "no-lease", answer.text
    assert rest(front).load_table(table.name()).metadata_location == table.metadata_location
    # with the commit's own sequence number it reads as data: an added file in p=2, which
    # cannot conflict with the rewrite in flight and passes its hold, counted as added
    snapshot_id, seq = ids(), table.metadata.last_sequence_number + 1
    smuggled = entry(snapshot_id, data_file(table, "2", "again"), ManifestEntryStatus.EXISTING, seq)
    manifests = [new_manifest(table, snapshot_id, [smuggled]), *head.manifests(table.io)]
    listed = manifest_list(table, snapshot_id, head.snapshot_id, seq, manifests)
    answer = post(
        front, table, snapshot_commit(table, snapshot_id, head.snapshot_id, listed, "append")
    )
    assert answer.status_code == 200, answer.text
    passed = last_commit(front)
    assert passed["detail"]["added-data-files"] == 1 and passed["detail"]["partitions"] == ["p=2"]
    assert passed["detail"]["can_conflict"] is False
    # the honest file alone, outside the held partition, passes
    table = rest(front).load_table(table.name())
    head = table.current_snapshot()
    snapshot_id = ids()
    honest = entry(snapshot_id, data_file(table, "9", "honest"), ManifestEntryStatus.ADDED)
    manifests = [new_manifest(table, snapshot_id, [honest]), *head.manifests(table.io)]
    seq = table.metadata.last_sequence_number + 1
    listed = manifest_list(table, snapshot_id, head.snapshot_id, seq, manifests)
    body = snapshot_commit(table, snapshot_id, head.snapshot_id, listed, "append")
    assert post(front, table, body).status_code == 200


def test_a_retried_append_whose_manifest_keeps_its_first_tries_number_is_data(front):
    """Iceberg's Java client, retrying an append after a 409, lists its new manifest with the
    sequence number of its first try, older than the snapshot's: its files inherit that number,
    and the commit is an append (it passes the hold on p=2, which it cannot conflict with). A
    file whose own entry carries a number older than its manifest's is a rewrite's, and needs a
    maintenance lease."""
    table = held_table(front, "retried")
    head = table.current_snapshot()
    # its first try had the number the head (another commit) then took; the retry's snapshot
    # has the next one, its manifest the first try's
    first_try = table.metadata.last_sequence_number
    snapshot_id = ids()
    added = entry(snapshot_id, data_file(table, "2", "retried"), ManifestEntryStatus.ADDED)
    manifests = [new_manifest(table, snapshot_id, [added]), *head.manifests(table.io)]
    listed = manifest_list(table, snapshot_id, head.snapshot_id, first_try, manifests)
    answer = post(
        front, table, snapshot_commit(table, snapshot_id, head.snapshot_id, listed, "append")
    )
    assert answer.status_code == 200, answer.text
    passed = last_commit(front)
    assert passed["detail"]["can_conflict"] is False  # a data commit's
    table = rest(front).load_table(table.name())
    head = table.current_snapshot()
    snapshot_id = ids()
    kept = entry(snapshot_id, data_file(table, "2", "kept"), ManifestEntryStatus.ADDED, 1)
    manifests = [new_manifest(table, snapshot_id, [kept]), *head.manifests(table.io)]
    seq = table.metadata.last_sequence_number + 1
    listed = manifest_list(table, snapshot_id, head.snapshot_id, seq, manifests)
    answer = post(
        front, table, snapshot_commit(table, snapshot_id, head.snapshot_id, listed, "append")
    )
    assert answer.status_code == 403 and answer.json()["reason"] == "no-lease", answer.text


class DeleteManifestWriter(ManifestWriterV2):
    """pyiceberg writes data manifests only; Iceberg keeps delete files in manifests of their
    own."""

    def content(self) -> ManifestContent:
        return ManifestContent.DELETES

    @property
    def _meta(self) -> dict[str, str]:
        return {**super()._meta, "content": "deletes"}


def delete_manifest(table: Any, snapshot_id: int, entries: list[ManifestEntry]) -> ManifestFile:
    path = f"{table.location()}/metadata/{uuid.uuid4()}-d0.avro"
    with DeleteManifestWriter(
        table.spec(), table.schema(), table.io.new_output(path), snapshot_id, "null"
    ) as writer:
        for e in entries:
            writer.add_entry(e)
    return writer.to_manifest_file()


def test_delete_files_older_than_every_live_data_file_are_no_partitions_business(front):
    """Iceberg drops, with any commit, the delete files older than every live data file, from
    any partition: they apply to no row. A rewrite under a lease on p=2 that drops such a file
    of p=3 passes; one that drops a delete file of p=3 still in force is out of its scope."""
    catalog = rest(front)
    catalog.create_namespace("stale")
    table = catalog.create_table("stale.t", SCHEMA, partition_spec=SPEC)
    for n, p in enumerate(("1", "2", "3")):
        table.append(pa.table({"id": pa.array([n], pa.int64()), "p": [p]}))

    def commit(build: Any, operation: str, **summary: str) -> httpx.Response:
        nonlocal table
        table = catalog.load_table("stale.t")
        head = table.current_snapshot()
        snapshot_id, seq = ids(), table.metadata.last_sequence_number + 1
        listed = manifest_list(table, snapshot_id, head.snapshot_id, seq, build(snapshot_id, head))
        body = snapshot_commit(table, snapshot_id, head.snapshot_id, listed, operation, **summary)
        return post(front, table, body)

    # a position delete file in p=3 (sequence number 4)
    moot = data_file(table, "3", "moot-deletes", DataFileContent.POSITION_DELETES)
    answer = commit(
        lambda sid, head: [
            *head.manifests(table.io),
            delete_manifest(table, sid, [entry(sid, moot, ManifestEntryStatus.ADDED)]),
        ],
        "delete",
    )
    assert answer.status_code == 200, answer.text
    table = catalog.load_table("stale.t")
    (first_deletes,) = [
        m
        for m in table.current_snapshot().manifests(table.io)
        if m.content == ManifestContent.DELETES
    ]
    # every data file replaced by newer ones (4 for 3: an overwrite, not a rewrite), and a
    # delete file of p=3 that applies to them: the first one now applies to no row
    live = data_file(table, "3", "live-deletes", DataFileContent.POSITION_DELETES)

    def overwrite(sid: int, head: Any) -> list[ManifestFile]:
        files = [data_file(table, p, f"new{i}") for i, p in enumerate(("1", "2", "3", "3"))]
        data = new_manifest(table, sid, [entry(sid, f, ManifestEntryStatus.ADDED) for f in files])
        kept = [m for m in head.manifests(table.io) if m.content == ManifestContent.DELETES]
        added = delete_manifest(table, sid, [entry(sid, live, ManifestEntryStatus.ADDED)])
        return [data, *kept, added]

    answer = commit(overwrite, "overwrite")
    assert answer.status_code == 200, answer.text
    table = catalog.load_table("stale.t")
    floor = table.metadata.last_sequence_number  # the new data files' and the live deletes'
    with httpx.Client(base_url=front.url, headers=auth("job"), timeout=30) as api:
        granted = api.post(
            f"/v1/tables/{CATALOG}.stale.t/maintenance-lease",
            json={"holder": "compactor-1", "ttl_s": 120, "partitions": ["p=2"]},
        )
    assert granted.status_code == 201, granted.text
    lease = {"lakelock.lease-id": granted.json()["lease_id"]}
    lease["lakelock.token"] = str(granted.json()["token"])

    def dropping(file: DataFile, seq: int) -> Any:
        def build(sid: int, head: Any) -> list[ManifestFile]:
            manifests = head.manifests(table.io)
            held = next(
                m
                for m in manifests
                if any(
                    e.data_file.file_path == file.file_path
                    for e in m.fetch_manifest_entry(table.io)
                )
            )
            gone = delete_manifest(table, sid, [entry(sid, file, ManifestEntryStatus.DELETED, seq)])
            return [*(m for m in manifests if m.manifest_path != held.manifest_path), gone]

        return build

    # the delete file still in force, of p=3: outside the lease's p=2
    answer = commit(dropping(live, floor), "replace", **lease)
    assert answer.status_code == 403 and answer.json()["reason"] == "out-of-scope", answer.text
    # the one that applies to no row: no partition's business
    assert first_deletes.sequence_number < floor
    answer = commit(dropping(moot, first_deletes.sequence_number), "replace", **lease)
    assert answer.status_code == 200, answer.text


def test_a_snapshot_is_judged_against_the_branch_head_not_the_parent_it_names(front):
    """It names the first snapshot as its parent and lists that one's manifests and a new file
    in p=9: against the head, it dropped the manifests of p=2 and p=3."""
    table = held_table(front, "rebased")
    first = table.metadata.snapshots[0]
    snapshot_id = ids()
    honest = entry(snapshot_id, data_file(table, "9", "honest"), ManifestEntryStatus.ADDED)
    manifests = [new_manifest(table, snapshot_id, [honest]), *first.manifests(table.io)]
    listed = manifest_list(table, snapshot_id, first.snapshot_id, 9, manifests)
    answer = post(
        front, table, snapshot_commit(table, snapshot_id, first.snapshot_id, listed, "append")
    )
    assert_held(front, table, answer)


@pytest.mark.parametrize("what", ["fifo", "garbage", "token"])
def test_what_the_service_must_not_read_or_store_is_the_clients_400(front, what):
    if what == "fifo" and front.warehouse is None:
        pytest.skip("object storage has no FIFOs")
    table = held_table(front, f"bad_{what}")
    head = table.current_snapshot()
    folder = table.location() + "/metadata"
    snapshot_id = ids()
    listed = manifest_list(table, snapshot_id, head.snapshot_id, 9, head.manifests(table.io))
    summary: dict[str, str] = {}
    if what == "fifo":
        listed = f"{folder}/fifo.avro"
        os.mkfifo(listed.removeprefix("file://"))
        words = "not a regular file"
    elif what == "garbage":
        listed = f"{folder}/garbage.avro"
        with table.io.new_output(listed).create() as out:
            out.write(random.Random(7).randbytes(1000))
        words = "is not an Avro file Iceberg writes"
    else:
        summary = {"lakelock.token": str(2**70)}
        words = "lakelock.token"
    body = snapshot_commit(table, snapshot_id, head.snapshot_id, listed, "append", **summary)
    answer = post(front, table, body)
    assert answer.status_code == 400, answer.text
    assert words in answer.json()["detail"]
    assert rest(front).load_table(table.name()).metadata_location == table.metadata_location


def test_a_snapshot_whose_parent_the_same_commit_adds_is_read_inside_the_table_only(front):
    """A commit adds A, then B, A's parent, whose manifest list lies in another table's
    folder: A is judged against B, and B's list is checked before any file is read, so the
    service reads nothing of the other table's: a 400, the table unchanged."""
    table = held_table(front, "chain")
    other = held_table(front, "chain_other")
    head = table.current_snapshot()
    outside = other.current_snapshot().manifest_list
    a, b = ids(), ids()
    listed = manifest_list(table, a, b, 9, head.manifests(table.io))
    body = snapshot_commit(table, a, b, listed, "append")
    parent = json.loads(json.dumps(body["updates"][0]))
    parent["snapshot"] |= {
        "snapshot-id": b,
        "parent-snapshot-id": head.snapshot_id,
        "sequence-number": table.metadata.last_sequence_number + 2,  # applied after A
    }
    parent["snapshot"]["manifest-list"] = outside
    body["updates"].insert(1, parent)
    answer = post(front, table, body)
    assert answer.status_code == 400, answer.text
    assert "is outside the table's folder" in answer.json()["detail"]
    assert rest(front).load_table(table.name()).metadata_location == table.metadata_location


def test_an_empty_manifest_list_is_the_clients_400(front):
    table = held_table(front, "empty_list")
    head = table.current_snapshot()
    listed = f"{table.location()}/metadata/empty.avro"
    with table.io.new_output(listed).create() as out:
        out.write(b"")
    snapshot_id = ids()
    answer = post(
        front, table, snapshot_commit(table, snapshot_id, head.snapshot_id, listed, "append")
    )
    assert answer.status_code == 400, answer.text
    assert "is not an Avro file Iceberg writes" in answer.json()["detail"]
