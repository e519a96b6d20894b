"""The files counted per partition as commits land, and the partitions due for compaction
(docs/design.md §5.1): what a release or a debt report counts, `GET /v1/due` and a table's `due`.

    PartitionFiles   request part: the files of one partition (a release's, a debt report's)
    CountedFiles     request part: partition name -> its PartitionFiles
    DuePartition     a partition due for compaction
    Due              the answer of the long-poll for due partitions (`GET /v1/due`)
    TableDue         a table's due partitions and how fast compaction follows (TableState.due)
"""

from __future__ import annotations

from typing import Annotated, TypeAlias

from pydantic import BeforeValidator, Field, model_validator

from service.wire.common import Answer, Body, PartitionName, partition_name, whole

__all__ = [
    "MAX_COUNTED_FILES",
    "MAX_COUNTED_PARTITIONS",
    "CountedFiles",
    "Due",
    "DuePartition",
    "FileCount",
    "PartitionFiles",
    "TableDue",
    "counted_files",
]

MAX_COUNTED_PARTITIONS = 1000
"""Partitions one release or one debt report may count files of."""

MAX_COUNTED_FILES = 10_000_000
"""Files of one kind one release or one debt report may count in one partition: far more than
any commit adds or any partition holds, and small enough that no sum of the service's counts
overflows a database's integers (service.lock.due caps what it adds up)."""

FileCount: TypeAlias = Annotated[
    Annotated[int, Field(ge=0, le=MAX_COUNTED_FILES)], BeforeValidator(whole)
]


# -- requests --------------------------------------------------------------------------------


class PartitionFiles(Body):
    """Files of one partition: data files and delete files, and of the delete files those that
    delete by equality (a Flink upsert's; a partition is due at fewer of them)."""

    data_files: FileCount
    delete_files: FileCount
    equality_delete_files: FileCount = 0

    @model_validator(mode="after")
    def _equality_within_deletes(self) -> PartitionFiles:
        if self.equality_delete_files > self.delete_files:
            raise ValueError(
                f"equality_delete_files ({self.equality_delete_files}) counts some of the "
                f"delete_files ({self.delete_files}): send at most as many"
            )
        return self


# partition name -> its files; a key that is no partition name is refused (the schema says so
# too: no property outside the name's pattern)
CountedFiles = Annotated[
    dict[PartitionName, PartitionFiles],
    Field(max_length=MAX_COUNTED_PARTITIONS, json_schema_extra={"additionalProperties": False}),
]


def counted_files(files: dict[str, PartitionFiles] | None) -> dict[str, PartitionFiles] | None:
    """`files` when each key is a partition name, else a ValueError that says what to send."""
    for name in files or {}:
        partition_name(name)
    return files


# -- answers ---------------------------------------------------------------------------------


class DuePartition(Answer):
    """A partition due for compaction: the files counted since it was last compacted reached
    the due threshold `due_s` seconds ago (by the database clock)."""

    table: str
    partition: str
    data_files: int = Field(
        description="data files added since its last compaction, net of those deleted"
    )
    delete_files: int = Field(
        description="delete files added since its last compaction, net of those removed"
    )
    equality_delete_files: int = Field(
        default=0, description="of the delete files, those that delete by equality"
    )
    commits: int = Field(default=0, description="the commits that added them")
    due_s: float = Field(description="seconds since it became due")


class Due(Answer):
    """The answer of the long-poll for due partitions: most files first."""

    due: tuple[DuePartition, ...]
    waited_s: float = Field(description="how long the call waited on the service")


class TableDue(Answer):
    """The table's partitions as commits land (docs/design.md §5.1): what is due now, how long
    compaction took to follow over the last hour, and the compactors that follow the table."""

    partitions_due: int = Field(description="partitions due for compaction now")
    oldest_due_s: float | None = Field(
        default=None, description="seconds since the longest-waiting due partition became due"
    )
    partitions_counted: int = Field(
        description="partitions with files counted since their last compaction"
    )
    data_files: int = Field(description="data files counted over those partitions")
    delete_files: int = Field(description="delete files counted over those partitions")
    compacted_last_hour: int = Field(description="due partitions compacted in the last hour")
    due_to_compacted_p50_s: float | None = Field(
        default=None, description="median seconds from due to compacted, over the last hour"
    )
    due_to_compacted_p95_s: float | None = Field(
        default=None, description="95th percentile of the same"
    )
    followers: int = Field(
        default=0, description="compactors that long-polled for this table's due partitions lately"
    )
    followers_waiting: int = Field(
        default=0, description="those of them parked on their long-poll now"
    )
