"""Readers: a job streaming out of a table holds the snapshots it has not read yet from expiry
(`/v1/tables/{table}/readers/{reader}`, TableState.readers).

    ReaderBody   request: where the reader stands, and how long the hold lasts
    ReaderHold   a live reader's hold on snapshot expiry
"""

from __future__ import annotations

from pydantic import Field

from service.wire.common import Answer, Body, Count, SnapshotId

__all__ = ["MAX_READER_TTL_S", "READER_PATTERN", "ReaderBody", "ReaderHold"]

READER_PATTERN = r"^[A-Za-z0-9._:@-]{1,128}$"
"""A reader's name, in the path of its hold: `orders-to-summary@host-1`."""

MAX_READER_TTL_S = 86400.0


class ReaderBody(Body):
    """Where a job streaming out of the table stands: the snapshot it has not read past yet.
    `expire_snapshots` keeps that snapshot and every later one while the hold is live."""

    snapshot_id: SnapshotId = Field(
        description="the reader's position: it still needs this snapshot and the later ones"
    )
    ttl_s: float = Field(
        gt=0,
        le=MAX_READER_TTL_S,
        description="seconds the hold lasts without another PUT; put again at a third of it",
    )
    snapshots_behind: Count | None = Field(
        default=None, description="snapshots committed after the position, as the reader counts"
    )


class ReaderHold(Answer):
    """A live reader's hold on snapshot expiry."""

    reader: str
    snapshot_id: int
    snapshots_behind: int | None = None
    remaining_s: float = Field(description="seconds until it lapses without another PUT")
    held_s: float = Field(description="seconds since the reader first put it")
    advanced_s_ago: float = Field(description="seconds since its position last moved")
