"""A real partition rewrite sent as Spark's rewrite sends it, for the catalog front's tests.

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
from pyiceberg.table.snapshots import Operation
from pyiceberg.table.update.snapshot import _OverwriteFiles

__all__ = ["rewrite_body"]


def rewrite_body(
    table: Any, day: date, properties: dict[str, str], label: str = "replace"
) -> dict[str, Any] | None:
    """The commit body that rewrites partition `dt=day` of `table` (None: it has no files),
    its snapshot labelled `label` (Spark's rewrite says `replace`)."""
    where = EqualTo("dt", day.isoformat())
    files = [task.file for task in table.scan(row_filter=where).plan_files()]
    if not files:
        return None
    data = table.scan(row_filter=where).to_arrow()
    producer = _OverwriteFiles(
        operation=Operation.OVERWRITE,
        transaction=table.transaction(),
        io=table.io,
        snapshot_properties=properties,
    )
    for f in files:
        producer.delete_data_file(f)
    for f in _dataframe_to_data_files(
        table.metadata, data, table.io, write_uuid=producer.commit_uuid
    ):
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
