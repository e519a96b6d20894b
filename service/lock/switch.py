"""The operator switch of a table (docs/design.md §3, docs/operating.md).

    set_switch(conn, table, reason, actor, ingest, maintenance, backpressure) -> TableState

Always audited (`switch.set`, with what it was and what it is); a field left None is unchanged.
"""

from __future__ import annotations

import dataclasses
from typing import Literal

from sqlalchemy.engine import Connection

from service.lock import audit, expiry, store
from service.lock.state import state_of
from service.wire import EventName, TableState

__all__ = ["set_switch"]


def set_switch(
    conn: Connection,
    *,
    table: str,
    reason: str,
    actor: str,
    ingest: Literal["running", "paused"] | None = None,
    maintenance: Literal["enabled", "disabled"] | None = None,
    backpressure: Literal["enabled", "disabled"] | None = None,
) -> TableState:
    """Set the operator switch; any field may be None (unchanged). Always audited."""
    row, at = expiry.locked_table(conn, table)
    row, _ = expiry.live_now(conn, row, at)
    changed = dataclasses.replace(
        row,
        ingest=ingest or row.ingest,
        maintenance=maintenance or row.maintenance,
        backpressure=backpressure or row.backpressure,
        switch_reason=reason,
        switch_by=actor,
        switch_at=at,
    )
    before = {"ingest": row.ingest, "maintenance": row.maintenance}
    after = {"ingest": changed.ingest, "maintenance": changed.maintenance}
    if backpressure is not None or row.backpressure != "enabled":
        before["backpressure"] = row.backpressure
        after["backpressure"] = changed.backpressure
    store.update_table(conn, table, **after, switch_reason=reason, switch_by=actor, switch_at=at)
    audit.record(
        conn,
        at=at,
        table=table,
        event=EventName.SWITCH_SET,
        actor=actor,
        reason=reason,
        before=before,
        after=after,
    )
    return state_of(conn, changed, at)
