"""Compaction debt: what a compactor measured of a table, and the latest report as a table shows
it (`PUT /v1/tables/{table}/debt`, TableState.debt).

    DebtBody    request: a table's compaction debt as a compactor measured it
    TableDebt   the latest report, with who sent it and how long ago
"""

from __future__ import annotations

import re
from datetime import datetime
from typing import Annotated

from pydantic import Field, field_validator

from service.wire.common import Answer, Body, Count, SnapshotId
from service.wire.due import CountedFiles, PartitionFiles, counted_files

__all__ = ["DateTimeText", "DebtBody", "TableDebt", "is_rfc3339"]

DateTimeText = Annotated[str, Field(max_length=64, json_schema_extra={"format": "date-time"})]

_RFC3339 = re.compile(
    r"(\d{4})-(\d{2})-(\d{2})[Tt](\d{2}):(\d{2}):(\d{2})(\.\d+)?([Zz]|[+-](\d{2}):(\d{2}))"
)


def is_rfc3339(text: str) -> bool:
    """A `date-time` of RFC 3339 (JSON Schema's format): a real date and time, an offset
    (`Z` or +hh:mm), a leap second (:60) allowed."""
    found = _RFC3339.fullmatch(text)
    if found is None:
        return False
    year, month, day, hour, minute, second = (int(found.group(n)) for n in range(1, 7))
    offset_h, offset_m = (int(found.group(n) or 0) for n in (9, 10))
    try:
        datetime(year, month, day, hour, minute, min(second, 59))
    except ValueError:
        return False
    return second <= 60 and offset_h <= 23 and offset_m <= 59


# -- requests --------------------------------------------------------------------------------


class DebtBody(Body):
    """A table's compaction debt as a compactor measured it: the latest report of a table
    replaces the one before (`compactor.debt` says how each count is measured)."""

    snapshot_id: SnapshotId | None = Field(
        default=None,
        description="the Iceberg snapshot measured (null: an empty table); a 64-bit id, past "
        "2^53 in most tables",
    )
    data_files: Count = Field(description="live data files")
    small_files: Count = Field(description="data files under the compactor's small size")
    delete_files: Count = Field(description="delete files that still apply, dangling ones too")
    partitions_over_target: Count = Field(
        description="partitions a rewrite would change (enough small files, or delete files)"
    )
    partitions_over_bound: Count | None = Field(
        default=None,
        description="partitions past the compactor's hard bound of small or delete files, whose "
        "writers backpressure holds while a compactor compacts them",
    )
    worst_partition: Count | None = Field(
        default=None, description="the most small plus delete files in one partition"
    )
    records: Count | None = Field(default=None, description="live records, when known")
    partitions: CountedFiles | None = Field(
        default=None,
        description="small data files and delete files per partition, as measured on the "
        "table (at most 1000 partitions, those with the most files): when sent, they replace "
        "the files the service counted as commits landed, and a partition not named counts "
        "none (docs/design.md §5.1)",
        examples=[{"dt=2024-06-20/hr=13": {"data_files": 6, "delete_files": 2}}],
    )
    measured_at: DateTimeText | None = Field(
        default=None,
        description="when the compactor measured, by its clock: an RFC 3339 date-time with its "
        "offset (2024-06-20T13:05:00Z); kept as sent. The service stamps each report with its "
        "own clock too",
        examples=["2024-06-20T13:05:00Z"],
    )

    @field_validator("partitions")
    @classmethod
    def _partition_keys(
        cls, files: dict[str, PartitionFiles] | None
    ) -> dict[str, PartitionFiles] | None:
        return counted_files(files)

    @field_validator("measured_at")
    @classmethod
    def _rfc3339(cls, value: str | None) -> str | None:
        if value is not None and not is_rfc3339(value):
            raise ValueError(
                f"{value[:40]!r} is not an RFC 3339 date-time; send it with its offset, e.g. "
                "2024-06-20T13:05:00Z"
            )
        return value


# -- answers ---------------------------------------------------------------------------------


class TableDebt(Answer):
    """The latest compaction debt a compactor reported for the table (`DebtBody`), with who
    reported it and how long ago by the database clock.

    debt.weight   # small files + delete files: what `lakelock status` and the page rank by
    """

    snapshot_id: int | None
    data_files: int
    small_files: int
    delete_files: int
    partitions_over_target: int
    partitions_over_bound: int | None = None
    worst_partition: int | None = None
    records: int | None = None
    measured_at: str | None = None
    reported_by: str | None = None
    reported_s_ago: float = Field(description="seconds since the report, by the database clock")

    @property
    def weight(self) -> int:
        return self.small_files + self.delete_files
