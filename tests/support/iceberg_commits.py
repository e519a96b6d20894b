"""Commits for the catalog front's tests: a real partition rewrite sent as Spark's rewrite
sends it (`rewrite_body`), and a snapshot's files counted as the front counts them (`counted`).

pyiceberg writes a partition's rows again as one file and the manifests that delete the old
files and add the new one; it has no `replace` operation of its own, so the commit's body is
built from its updates and sent as `replace` over HTTP.
"""

from __future__ import annotations

import json
from datetime import date
from typing import Any

from pyiceberg.expressions import EqualTo
from pyiceberg.io.pyarrow import _dataframe_to_data_files
from pyiceberg.manifest import DataFile
from pyiceberg.table.snapshots import Operation
from pyiceberg.table.update.snapshot import _OverwriteFiles

from service.catalog.manifests import Written, _count

__all__ = ["counted", "rewrite_body"]


class _Entry:
    def __init__(self, file: DataFile) -> None:
        self.data_file = file


def counted(*files: tuple[DataFile, bool]) -> Written:
    """A snapshot's `Written`, counted by the front's own `_count` (file, added), in spec 0."""
    w = Written()
    for file, added in files:
        _count(w, _Entry(file), "m.avro", 0, added)  # type: ignore[arg-type]
    return w


Rewritten = tuple[list[Any], list[Any]]  # the data files a rewrite replaces, and its new ones


def rewrite_files(table: Any, day: date) -> Rewritten | None:
    """Partition `dt=day` of `table` read and written again as new files (None: it has no
    files)."""
    where = EqualTo("dt", day.isoformat())
    files = [task.file for task in table.scan(row_filter=where).plan_files()]
    if not files:
        return None
    data = table.scan(row_filter=where).to_arrow()
    return files, list(_dataframe_to_data_files(table.metadata, data, table.io))


def rewrite_body(
    table: Any,
    day: date,
    properties: dict[str, str],
    label: str = "replace",
    rewritten: Rewritten | None = None,
) -> dict[str, Any] | None:
    """The commit body that rewrites partition `dt=day` of `table` (None: it has no files),
    its snapshot labelled `label` (Spark's rewrite says `replace`): the files `rewritten` gives
    (a rewrite applied again on a newer head, as a client retries its commit), or new ones."""
    rewritten = rewritten or rewrite_files(table, day)
    if rewritten is None:
        return None
    producer = _OverwriteFiles(
        operation=Operation.OVERWRITE,
        transaction=table.transaction(),
        io=table.io,
        snapshot_properties=properties,
    )
    replaced, new = rewritten
    for f in replaced:
        producer.delete_data_file(f)
    for f in new:
        producer.append_data_file(f)
    updates, requirements = producer._commit()
    body = {
        "requirements": [json.loads(r.model_dump_json()) for r in requirements],
        "updates": [json.loads(u.model_dump_json()) for u in updates],
    }
    for update in body["updates"]:
        if update["action"] == "add-snapshot":
            update["snapshot"]["summary"]["operation"] = label
    return body
