"""Prove from Iceberg's own history that every commit landed inside its lease.

    snapshots = read_snapshots(metadata_file("var/warehouse", "local.db.events"))
    report = audit(snapshots, client.events(table="local.db.events", limit=1000))
    report.clean          # False when any commit broke the protocol
    report.violations     # the offending snapshots, each with what is wrong

The lease intervals come from the service's audit trail (`lease.acquired` opens one; its
`lease.released`, `lease.revoked` or `lease.expired` closes it at acquired + `held_s`); the
commits from the snapshots' summaries (see ingest_gate.job.snapshots and compactor.run):

    maintenance commit   `lakelock.token` and `lakelock.lease-id`
    ingest commit        `lakelock.lease-id` (`none` when the gate let it through without one)

Each commit is checked against these rules:

    own lease         its lease id was granted on this table, to its kind of writer, and the
                      commit's timestamp lies inside that lease's live interval
    token             a maintenance commit carries its lease's fencing token
    no overlap        no ingest commit lies strictly inside a maintenance lease whose scope
                      intersects the commit's (what it touched per its manifests, else its
                      lease's declared `partitions`; absent = the whole table)

A snapshot's timestamp comes from the committing job's clock and the intervals from the
database's, so `skew` widens a lease's own interval and narrows the maintenance intervals by
that much. Snapshots older than the oldest event read (the trail was cut by `limit`) cannot be
judged; they are listed as `unverified`, not as violations. A snapshot without any lakelock
property was written by a writer that does not take leases: a violation, whatever it did; its
finding says what it added and removed and where (`describe_changes`), so an operator can tell
a job writing rows around lakelock from a maintenance step run outside it.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from service.wire.events import EventName
from service.wire.scope import intersects, scope_of
from service.wire.text import sample

__all__ = [
    "LEASE_ID",
    "TOKEN",
    "AuditReport",
    "Finding",
    "LeaseInterval",
    "SnapshotRecord",
    "audit",
    "describe_changes",
    "lease_intervals",
    "load_catalog_table",
    "metadata_file",
    "read_catalog_snapshots",
    "read_snapshots",
    "snapshot_records",
]

TOKEN = "lakelock.token"
LEASE_ID = "lakelock.lease-id"
NO_LEASE = "none"  # ingest_gate.job.snapshots.batch_properties writes it for an ungated commit
_ENDS = (EventName.LEASE_RELEASED, EventName.LEASE_REVOKED, EventName.LEASE_EXPIRED)


@dataclass(frozen=True)
class SnapshotRecord:
    """One Iceberg snapshot as the audit needs it.

    `partitions` are the partition paths its added and removed files belong to (None: not known,
    or an unpartitioned table, which counts as the whole table).
    """

    snapshot_id: int
    committed_at: datetime
    operation: str
    summary: Mapping[str, str]
    partitions: frozenset[str] | None = None

    @property
    def lease_id(self) -> str | None:
        return self.summary.get(LEASE_ID)

    @property
    def kind(self) -> str:
        """`maintenance` (carries a token), `ingest` (a lease id only) or `unattributed`."""
        if TOKEN in self.summary:
            return "maintenance"
        return "ingest" if LEASE_ID in self.summary else "unattributed"


@dataclass(frozen=True)
class LeaseInterval:
    """A lease's live interval from the audit trail; `start` None when granted before the
    oldest event read, `end` None while still live."""

    lease_id: str
    kind: str
    holder: str | None
    token: int | None
    partitions: frozenset[str] | None
    start: datetime | None
    end: datetime | None

    def holds(self, at: datetime, *, skew: timedelta, since: datetime | None) -> bool:
        """`at` lies inside the interval, widened by `skew` (an unknown start is `since`)."""
        start = self.start or since
        if start is not None and at < start - skew:
            return False
        return self.end is None or at <= self.end + skew

    def strictly_holds(self, at: datetime, *, skew: timedelta) -> bool:
        """`at` lies inside the interval narrowed by `skew` at both ends."""
        if self.start is not None and at <= self.start + skew:
            return False
        return self.end is None or at < self.end - skew


@dataclass(frozen=True)
class Finding:
    snapshot_id: int
    committed_at: datetime
    operation: str
    kind: str
    lease_id: str | None
    problems: tuple[str, ...] = ()

    @property
    def ok(self) -> bool:
        return not self.problems

    def as_dict(self) -> dict[str, Any]:
        return {
            "snapshot_id": self.snapshot_id,
            "committed_at": _iso(self.committed_at),
            "operation": self.operation,
            "kind": self.kind,
            "lease_id": self.lease_id,
            "ok": self.ok,
            "problems": list(self.problems),
        }


@dataclass(frozen=True)
class AuditReport:
    table: str
    checked: list[Finding] = field(default_factory=list)
    unverified: list[Finding] = field(default_factory=list)
    history_from: datetime | None = None

    @property
    def violations(self) -> list[Finding]:
        return [f for f in self.checked if not f.ok]

    @property
    def clean(self) -> bool:
        return not self.violations

    def as_dict(self) -> dict[str, Any]:
        return {
            "table": self.table,
            "verdict": "clean" if self.clean else "violations",
            "snapshots_checked": len(self.checked),
            "ingest_commits": sum(f.kind == "ingest" for f in self.checked),
            "maintenance_commits": sum(f.kind == "maintenance" for f in self.checked),
            "violations": [f.as_dict() for f in self.violations],
            "unverified": [f.as_dict() for f in self.unverified],
            "history_from": _iso(self.history_from) if self.history_from else None,
        }


def _iso(at: datetime) -> str:
    return at.astimezone(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def _parse_at(value: str) -> datetime:
    at = datetime.fromisoformat(value.replace("Z", "+00:00"))
    return at if at.tzinfo else at.replace(tzinfo=UTC)


def lease_intervals(events: Iterable[Mapping[str, Any]]) -> dict[str, LeaseInterval]:
    """Every lease the events mention, by id, with the interval it was live."""
    acquired: dict[str, Mapping[str, Any]] = {}
    ended: dict[str, Mapping[str, Any]] = {}
    for event in events:
        lease_id = event.get("lease_id")
        if not lease_id:
            continue
        if event["event"] == EventName.LEASE_ACQUIRED:
            acquired[lease_id] = event
        elif event["event"] in _ENDS:
            ended[lease_id] = event
    leases = {}
    for lease_id in acquired.keys() | ended.keys():
        grant, end = acquired.get(lease_id), ended.get(lease_id)
        first = grant or end
        assert first is not None
        detail = first.get("detail") or {}
        start = _parse_at(grant["at"]) if grant else None
        stop = None
        if end is not None:
            held_s = (end.get("detail") or {}).get("held_s")
            # an expiry is recorded when the sweep saw it, after the lease actually ended
            stop = (
                start + timedelta(seconds=float(held_s))
                if start is not None and held_s is not None
                else _parse_at(end["at"])
            )
        leases[lease_id] = LeaseInterval(
            lease_id=lease_id,
            kind=str(first.get("kind") or ""),
            holder=first.get("holder"),
            token=first.get("token"),
            partitions=scope_of(first.get("partitions", detail.get("partitions"))),
            start=start,
            end=stop,
        )
    return leases


def audit(
    snapshots: Sequence[SnapshotRecord],
    events: Sequence[Mapping[str, Any]],
    *,
    table: str = "",
    limit: int | None = None,
    skew: timedelta = timedelta(0),
) -> AuditReport:
    """Check every snapshot against the lease intervals of `events` (see the module docstring).

    `events` as `GET /v1/events` answers them, newest first; `limit` the limit they were read
    with: a read that hit it may have cut off older leases, so no commit before its oldest
    event is judged.
    """
    history_from = None
    if limit is not None and events and len(events) >= limit:
        history_from = min(_parse_at(e["at"]) for e in events)
    leases = lease_intervals(events)
    maintenance = [lease for lease in leases.values() if lease.kind == "maintenance"]
    checked, unverified = [], []
    # Iceberg timestamps are whole milliseconds, the database's microseconds
    skew = skew + timedelta(milliseconds=1)
    for snap in sorted(snapshots, key=lambda s: (s.committed_at, s.snapshot_id)):
        problems = _problems(snap, leases, maintenance, skew=skew, since=history_from)
        finding = Finding(
            snap.snapshot_id,
            snap.committed_at,
            snap.operation,
            snap.kind,
            snap.lease_id,
            tuple(problems),
        )
        if history_from is not None and snap.committed_at < history_from and problems:
            unverified.append(finding)
        else:
            checked.append(finding)
    return AuditReport(table, checked, unverified, history_from)


def _problems(
    snap: SnapshotRecord,
    leases: Mapping[str, LeaseInterval],
    maintenance: Sequence[LeaseInterval],
    *,
    skew: timedelta,
    since: datetime | None,
) -> list[str]:
    at = snap.committed_at
    if snap.kind == "unattributed":
        return [
            "no lakelock.lease-id: committed by a writer that takes no lease; "
            f"{snap.operation or 'a commit'} that {describe_changes(snap)}"
        ]
    if snap.lease_id == NO_LEASE:
        return ["committed outside any lease (lakelock.lease-id = none)"]
    lease = leases.get(snap.lease_id or "")
    if lease is None:
        return [f"lease {snap.lease_id} was never granted on this table"]
    problems = []
    wanted = "maintenance" if snap.kind == "maintenance" else "commit"
    if lease.kind != wanted:
        problems.append(f"an {snap.kind} commit under a {lease.kind} lease")
    if not lease.holds(at, skew=skew, since=since):
        problems.append(
            f"committed at {_iso(at)}, outside its lease "
            f"[{_iso(lease.start) if lease.start else '?'}, "
            f"{_iso(lease.end) if lease.end else 'live'}]"
        )
    if snap.kind == "maintenance" and str(lease.token) != snap.summary.get(TOKEN):
        problems.append(f"token {snap.summary.get(TOKEN)} is not its lease's ({lease.token})")
    if snap.kind == "ingest":
        scope = snap.partitions if snap.partitions is not None else lease.partitions
        for held in maintenance:
            if held.strictly_holds(at, skew=skew) and intersects(scope, held.partitions):
                problems.append(
                    f"landed inside maintenance lease {held.lease_id} "
                    f"(token {held.token}, holder {held.holder}) over an intersecting scope"
                )
    return problems


# what a commit changed, from the counts Iceberg keeps in its snapshot summary
_CHANGES = (
    ("added-data-files", "added", "data file"),
    ("deleted-data-files", "removed", "data file"),
    ("added-position-delete-files", "added", "position delete file"),
    ("removed-position-delete-files", "removed", "position delete file"),
    ("added-equality-delete-files", "added", "equality delete file"),
    ("removed-equality-delete-files", "removed", "equality delete file"),
    ("added-dvs", "added", "deletion vector"),
    ("removed-dvs", "removed", "deletion vector"),
)


def describe_changes(snap: SnapshotRecord) -> str:
    """What `snap` added and removed, in words, and where: enough for an operator to tell a
    writer of rows (adds data files, or position deletes beside them) from a maintenance step
    (replaces files: removes as many as it adds, or only delete files).

    "added 2 data files (40 records), removed 1 position delete file in dt=2024-06-20/hr=13"
    """
    summary = snap.summary
    parts = []
    for key, verb, noun in _CHANGES:
        count = int(summary.get(key, 0) or 0)
        if not count:
            continue
        text = f"{verb} {count} {noun}{'s' if count != 1 else ''}"
        records = summary.get("added-records" if verb == "added" else "deleted-records")
        if noun == "data file" and records:
            text += f" ({records} records)"
        parts.append(text)
    what = ", ".join(parts) or "changed no files"
    if snap.partitions:
        what += f" in {sample(sorted(snap.partitions))}"
    return what


# -- reading Iceberg metadata -----------------------------------------------------------------

_VERSION = re.compile(r"^v(\d+)\.metadata\.json$")


def metadata_file(warehouse: str | Path, table: str) -> Path:
    """The current metadata file of a Hadoop-catalog table under `warehouse`.

    `table` is `namespace.table` or `catalog.namespace.table` (the catalog part is not a folder).

    Raises:
        FileNotFoundError: the table has no metadata folder or no metadata file in it.
    """
    parts = table.split(".")
    folder = Path(warehouse).joinpath(*parts[-2:], "metadata")
    hint = folder / "version-hint.text"
    if hint.is_file():
        current = folder / f"v{hint.read_text().strip()}.metadata.json"
        if current.is_file():
            return current
    versions = sorted(
        (int(m.group(1)), p)
        for p in (folder.iterdir() if folder.is_dir() else [])
        if (m := _VERSION.match(p.name))
    )
    if not versions:
        raise FileNotFoundError(
            f"no Iceberg metadata for {table} in {folder}; pass the jobs' warehouse folder"
        )
    return versions[-1][1]


def read_snapshots(
    metadata_location: str | Path, properties: Mapping[str, str] | None = None
) -> list[SnapshotRecord]:
    """Every snapshot the metadata file lists, with the partitions each one's files touch.

    Reads metadata and manifests only (fsspec file IO; no pyarrow, no data files); on S3 with
    `properties` (`s3.endpoint`, `s3.region`, ...: pyiceberg's) and keys from the AWS chain.

    Raises:
        FileNotFoundError: a metadata or manifest file is missing.
        ValueError: the file is not Iceberg table metadata.
    """
    from pyiceberg.table import StaticTable

    table = StaticTable.from_metadata(
        str(metadata_location),
        properties={**(properties or {}), "py-io-impl": "pyiceberg.io.fsspec.FsspecFileIO"},
    )
    return snapshot_records(table)


def snapshot_records(table: Any) -> list[SnapshotRecord]:
    """Every snapshot of a pyiceberg `Table`, with the partitions each one's files touch."""
    from pyiceberg.manifest import ManifestEntryStatus

    schema, specs = table.schema(), table.specs()
    records = []
    for snap in table.snapshots():
        partitions: set[str] = set()
        partitioned = False
        for manifest in snap.manifests(table.io):
            if manifest.added_snapshot_id != snap.snapshot_id:
                continue
            spec = specs[manifest.partition_spec_id]
            partitioned = partitioned or not spec.is_unpartitioned()
            for entry in manifest.fetch_manifest_entry(table.io, discard_deleted=False):
                if entry.snapshot_id == snap.snapshot_id and (
                    entry.status != ManifestEntryStatus.EXISTING
                ):
                    partitions.add(spec.partition_to_path(entry.data_file.partition, schema))
        summary = snap.summary
        records.append(
            SnapshotRecord(
                snapshot_id=snap.snapshot_id,
                committed_at=datetime.fromtimestamp(snap.timestamp_ms / 1000, UTC),
                operation=str(summary.operation.value) if summary else "",
                summary=dict(summary.additional_properties) if summary else {},
                partitions=frozenset(partitions) if partitioned and partitions else None,
            )
        )
    return records


# -- reading a table through its catalog ------------------------------------------------------


def read_catalog_snapshots(
    table: str, *, catalog: str | None = None, properties: Mapping[str, str] | None = None
) -> list[SnapshotRecord]:
    """Every snapshot of `table` as its catalog has it now (see `load_catalog_table`)."""
    return snapshot_records(load_catalog_table(table, catalog=catalog, properties=properties))


def load_catalog_table(
    table: str, *, catalog: str | None = None, properties: Mapping[str, str] | None = None
) -> Any:
    """`table` (`catalog.namespace.table`, or `namespace.table` with `catalog`) loaded through
    a pyiceberg catalog: the one named `catalog` (default: the table's first part), configured
    by pyiceberg's own means (`~/.pyiceberg.yaml`, `PYICEBERG_CATALOG__<NAME>__<KEY>`) and
    `properties` over them. docs/catalogs.md lists the properties per catalog; the name must be
    the jobs' Spark catalog name where the catalog keeps it (JDBC's `catalog_name` column).

        load_catalog_table("lake.db.events", properties={
            "type": "sql", "uri": "mysql+pymysql://iceberg@db:3306/iceberg",
            "warehouse": "s3://bucket/wh"})

    Raises:
        ValueError: the name has no catalog part and `catalog` is not given, or the catalog
            cannot be configured from what is given.
        FileNotFoundError: the catalog has no such table.
    """
    from pyiceberg.catalog import load_catalog
    from pyiceberg.exceptions import NoSuchNamespaceError, NoSuchTableError

    parts = table.split(".")
    if len(parts) == 3:
        name = catalog or parts[0]
    elif len(parts) == 2 and catalog:
        name = catalog
    else:
        raise ValueError(f"{table}: give catalog.namespace.table, or the catalog's name")
    try:
        loaded = load_catalog(name, **dict(properties or {}))
    except (ValueError, TypeError) as exc:
        raise ValueError(f"catalog {name!r}: {exc}") from None
    try:
        return loaded.load_table((parts[-2], parts[-1]))
    except (NoSuchTableError, NoSuchNamespaceError) as exc:
        raise FileNotFoundError(f"{table}: not in catalog {name!r} ({exc})") from None
