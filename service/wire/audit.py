"""The audit trail as `GET /v1/events` answers it.

    Event    one audit event: what changed on a table, who did it, and its details
    Events   the answer: events, newest first

The events' names are `service.wire.events.EventName`.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from pydantic import Field, field_serializer

from service.wire.common import Answer

__all__ = ["Event", "Events"]


class Event(Answer):
    """One audit event: what changed on a table, who did it, and its details."""

    id: int
    at: datetime = Field(description="when, by the database clock (UTC)")
    table: str
    event: str
    lease_id: str | None
    kind: str | None
    holder: str | None
    token: int | None
    actor: str | None
    detail: dict[str, Any]

    @field_serializer("at")
    def _utc(self, at: datetime) -> str:
        # the database clock is naive UTC; the wire says so
        return at.isoformat() + "Z" if at.tzinfo is None else at.isoformat()


class Events(Answer):
    events: tuple[Event, ...]
