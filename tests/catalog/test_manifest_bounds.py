"""What a client's manifest may cost the catalog front (docs/catalog-front.md §5): a manifest of
a few hundred kilobytes that deflates to hundreds of thousands of entries, or one block that
inflates past the bound, is a 400 naming the setting, counted before pyiceberg parses a byte,
and the table is unchanged; a file that is no Avro container, or one of a codec the service
does not read, is a 400 too. Checked on the Avro scan itself and through a real service.
"""

from __future__ import annotations

import bz2

import pytest
from pyiceberg.manifest import ManifestEntryStatus

from service.catalog.avro import Scanned, scan
from service.catalog.limits import Budget, Limits
from service.wire.errors import InvalidRequest
from testkit.avro import bomb, container, deflated, nested
from testkit.commits import data_file, entry, manifest_list, new_manifest, snapshot_commit
from tests.catalog.test_fence_content import held_table, ids, post, rest
from tests.conftest import front_fixture


def test_a_scan_counts_entries_and_inflated_bytes_of_every_codec():
    plain = container(b"null", [(3, b"\x02\x04\x06"), (2, b"\x08\x0a")])
    assert scan(plain, what="x", max_entries=5, max_inflated=5) == Scanned(5, 5)
    zipped = container(b"deflate", [(1000, deflated(b"\x02" * 1000))])
    assert scan(zipped, what="x", max_entries=1000, max_inflated=1000).inflated == 1000
    bzipped = container(b"bzip2", [(1000, bz2.compress(b"\x02" * 1000))])
    assert scan(bzipped, what="x", max_entries=1000, max_inflated=1000).entries == 1000


@pytest.mark.parametrize(
    ("data", "bounds", "said"),
    [
        (
            container(b"null", [(3, b"\x02\x04\x06"), (2, b"\x08\x0a")]),
            (4, 100),
            "LAKELOCK_CATALOG_MAX_MANIFEST_ENTRIES",
        ),
        (
            # one block of a few hundred bytes that inflates to 10 MB: stopped at the bound
            container(b"deflate", [(10, deflated(b"\x00" * 10_000_000))]),
            (100, 1_000_000),
            "LAKELOCK_CATALOG_MAX_MANIFEST_BYTES",
        ),
        (container(b"zstandard", [(1, b"\x02")]), (10, 10), "compressed with 'zstandard'"),
        (b"PAR1" + b"\x00" * 100, (10, 10), "no Avro magic"),
        (container(b"null", [(1, b"\x02")])[:-3], (10, 10), "it ends early"),
        (container(b"deflate", [(1, b"\xff\xff\xff")]), (10, 10), "does not inflate"),
        (
            # a writer schema nested until a recursive parser gives out
            container(b"null", [(1, b"\x02")], schema=b'{"type":' * 5000 + b'"long"' + b"}" * 5000),
            (10, 10),
            "nested more than 64 levels deep",
        ),
    ],
    ids=["entries", "inflated", "codec", "no-avro", "cut-short", "bad-deflate", "nested"],
)
def test_a_file_past_a_bound_or_no_avro_is_the_clients_400(data, bounds, said):
    with pytest.raises(InvalidRequest, match=said):
        scan(data, what="m.avro", max_entries=bounds[0], max_inflated=bounds[1])


def test_a_file_read_twice_for_one_commit_counts_once_and_must_not_change():
    """The fence reads a new manifest in two passes; a client that swaps the file between
    them (after the storage's cache let it go) would skip the scan of what it swapped in."""
    budget = Budget(Limits(max_commit_entries=5))
    first = container(b"null", [(3, b"\x02\x04\x06")])
    budget.check("s3://b/wh/m.avro", first)
    budget.check("s3://b/wh/m.avro", first)  # read again: counted once
    assert budget.entries == 3
    with pytest.raises(InvalidRequest, match="changed while the commit was judged"):
        budget.check("s3://b/wh/m.avro", container(b"null", [(1, b"\x02")]))


front = front_fixture("manifest-bounds", ["sqlite"])


@pytest.mark.parametrize("kind", ["nested", "cut-short"])
def test_a_manifest_nested_too_deep_or_cut_short_is_a_400_that_changes_nothing(front, kind):
    table = held_table(front, f"malformed_{kind.replace('-', '_')}")
    head = table.current_snapshot()
    snapshot_id = ids()
    added = entry(snapshot_id, data_file(table, "1", kind), ManifestEntryStatus.ADDED)
    manifest = new_manifest(table, snapshot_id, [added], compression="deflate")
    path = manifest.manifest_path
    with table.io.new_input(path).open() as stream:
        data = stream.read()
    broken = nested(data, 20_000) if kind == "nested" else data[: len(data) - 40]
    with table.io.new_output(path).create(overwrite=True) as out:
        out.write(broken)
    listed = manifest_list(
        table, snapshot_id, head.snapshot_id, 9, [*head.manifests(table.io), manifest]
    )
    answer = post(
        front, table, snapshot_commit(table, snapshot_id, head.snapshot_id, listed, "append")
    )
    assert answer.status_code == 400, answer.text
    said = "nested more than 64 levels" if kind == "nested" else "is not an Avro file"
    assert said in answer.json()["detail"]
    assert rest(front).load_table(table.name()).metadata_location == table.metadata_location


def test_a_manifest_bomb_is_refused_before_it_is_parsed(front):
    """300,000 entries in a manifest of a few kilobytes: refused before pyiceberg parses one
    (benchmarks/manifest_bomb.py measures what it costs the service); the table unchanged."""
    table = held_table(front, "bomb")
    head = table.current_snapshot()
    snapshot_id = ids()
    added = entry(snapshot_id, data_file(table, "1", "bomb"), ManifestEntryStatus.ADDED)
    manifest = new_manifest(table, snapshot_id, [added], compression="deflate")
    path = manifest.manifest_path
    with table.io.new_input(path).open() as stream:
        exploded = bomb(stream.read(), 300_000)
    assert len(exploded) < 1_000_000
    with table.io.new_output(path).create(overwrite=True) as out:
        out.write(exploded)
    listed = manifest_list(
        table, snapshot_id, head.snapshot_id, 9, [*head.manifests(table.io), manifest]
    )
    body = snapshot_commit(table, snapshot_id, head.snapshot_id, listed, "append")
    answer = post(front, table, body)
    assert answer.status_code == 400, answer.text
    assert "holds more than 100000 entries" in answer.json()["detail"]
    assert "LAKELOCK_CATALOG_MAX_MANIFEST_ENTRIES" in answer.json()["detail"]
    assert rest(front).load_table(table.name()).metadata_location == table.metadata_location
