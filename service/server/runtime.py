"""What one service process shares between requests: settings, engine, metrics, long-poll waits.

Routes are `async`; the database is reached through `Runtime.transact(fn)` (one protocol call
in one transaction, `db.run_transaction`) and `Runtime.read(fn)`, each run on a worker thread
from a pool sized like the database pool, so a burst of calls queues for a connection instead
of piling up threads. A long-poll holds no thread while it waits: it parks on an asyncio event
that is set

    at once          when a transaction committed in this process changes its table
    within a tick    when another replica changed it: one task per process reads the versions
                     of every table someone waits on, in one query every
                     LAKELOCK_POLL_INTERVAL_S, however many wait
    at shutdown      every waiter answers with what it has

The long-polls for due partitions (GET /v1/due) park on a channel of their own, `due.CHANNEL`:
woken at once by a transaction of this process that made a partition due (`db.wake`), or that
ended a claim or set a switch (a table may be left to them now), and within a tick when another
replica made one due (the poller reads `due.marker` while anyone waits on the channel).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from functools import partial
from typing import Any, TypeVar

import anyio
import anyio.to_thread
from prometheus_client import Gauge

from service.lock import due, expiry, state
from service.lock.db import Connection, Engine, is_unavailable, run_transaction
from service.server.metrics import Metrics
from service.server.settings import Settings
from service.wire import EventName

__all__ = ["Changes", "ClientGone", "Runtime"]

log = logging.getLogger("lakelock.lease")
T = TypeVar("T")

# how often a parked long-poll checks that its client is still there
_DISCONNECT_CHECK_S = 0.5


class ClientGone(Exception):
    """The client of a long-poll disconnected: stop working for it (an intent is no longer
    kept open on behalf of a compactor that died)."""


@dataclass(eq=False)
class _Waiter:
    seen: object  # a table's version, or a channel's marker
    event: asyncio.Event = field(default_factory=asyncio.Event)


# committed events after which a table's due partitions may be left to another follower
_CLAIM_ENDS = {EventName.LEASE_RELEASED, EventName.LEASE_EXPIRED, EventName.LEASE_REVOKED}


class Changes:
    """Parks long-polls until their table's version moves. See the module docstring."""

    def __init__(self, parked: Gauge | None = None) -> None:
        self._waiters: dict[str, set[_Waiter]] = {}
        self._parked = parked  # the gauge of parked long-polls, kept by wait()
        self._loop: asyncio.AbstractEventLoop | None = None
        self.closing = threading.Event()

    def bind(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop

    @property
    def watched(self) -> list[str]:
        """The tables (and channels) someone waits on."""
        return [table for table, waiters in self._waiters.items() if waiters]

    def changed(self, tables: set[str]) -> None:
        """Wake the waiters of `tables`; safe from any thread."""
        if self._loop is not None and not self._loop.is_closed():
            self._loop.call_soon_threadsafe(self._wake, tables, None)

    def versions_read(self, versions: Mapping[str, object]) -> None:
        """The poller's reading: wake each waiter whose table (or channel) moved past what it
        saw."""
        for table, version in versions.items():
            for waiter in list(self._waiters.get(table, ())):
                if version != waiter.seen:
                    waiter.event.set()

    def close(self) -> None:
        """Shutdown: every parked long-poll answers now with what it has (any thread)."""
        self.closing.set()
        if self._loop is not None and not self._loop.is_closed():
            self._loop.call_soon_threadsafe(self._wake, None, None)

    def _wake(self, tables: set[str] | None, _: Any) -> None:
        for table, waiters in self._waiters.items():
            if tables is None or table in tables:
                for waiter in waiters:
                    waiter.event.set()

    async def wait(
        self,
        table: str,
        *,
        seen: object,
        until: float,
        is_disconnected: Callable[[], Any] | None = None,
    ) -> None:
        """Park until `table`'s version (or a channel's marker) moves past `seen`, the loop
        clock passes `until`, or the process shuts down.

        Raises:
            ClientGone: the client disconnected meanwhile.
        """
        loop = asyncio.get_running_loop()
        waiter = _Waiter(seen)
        self._waiters.setdefault(table, set()).add(waiter)
        if self._parked is not None:
            self._parked.inc()
        try:
            while not self.closing.is_set() and not waiter.event.is_set():
                left = until - loop.time()
                if left <= 0:
                    return
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(waiter.event.wait(), min(left, _DISCONNECT_CHECK_S))
                if is_disconnected is not None and await is_disconnected():
                    raise ClientGone()
        finally:
            if self._parked is not None:
                self._parked.dec()
            waiters = self._waiters.get(table)
            if waiters is not None:
                waiters.discard(waiter)
                if not waiters:
                    del self._waiters[table]


class Runtime:
    def __init__(self, settings: Settings, engine: Engine) -> None:
        self.settings = settings
        self.engine = engine
        self.metrics = Metrics()
        self.changes = Changes(self.metrics.parked)
        # one worker thread per pooled connection: more would only queue inside the pool
        self.db_limiter = anyio.CapacityLimiter(settings.db_pool_size)

    def _committed(self, events: list[dict[str, Any]]) -> None:
        self.metrics.observe_events(events)
        for event in events:
            log.info(
                event["event"],
                extra={
                    "event": event["event"],
                    "table": event["table_name"],
                    "lease_id": event["lease_id"],
                    "kind": event["kind"],
                    "holder": event["holder"],
                    "token": event["token"],
                    "actor": event["actor"],
                },
            )
        woken = {event["table_name"] for event in events}
        if any(
            event["event"] == EventName.SWITCH_SET
            or (event["event"] in _CLAIM_ENDS and event["kind"] == "claim")
            for event in events
        ):
            woken.add(due.CHANNEL)
        self.changes.changed(woken)

    # -- blocking calls, for worker threads (the sweeper, tests) ------------------------------

    @property
    def trigger(self) -> due.Trigger:
        """When a partition's counted files make it due (LAKELOCK_DUE_*)."""
        return due.Trigger(
            self.settings.due_data_files,
            self.settings.due_delete_files,
            self.settings.due_equality_delete_files,
        )

    def transact_sync(self, fn: Callable[[Connection], T]) -> T:
        return run_transaction(
            self.engine, fn, on_commit=self._committed, on_wake=self.changes.changed
        )

    def read_sync(self, fn: Callable[[Connection], T]) -> T:
        with self.engine.connect() as conn:
            return fn(conn)

    # -- the same, awaited from routes --------------------------------------------------------

    async def transact(self, fn: Callable[[Connection], T]) -> T:
        """Run one protocol call in one transaction on a worker thread."""
        return await anyio.to_thread.run_sync(self.transact_sync, fn, limiter=self.db_limiter)

    async def read(self, fn: Callable[[Connection], T]) -> T:
        """Run read-only `fn` on a worker thread."""
        return await anyio.to_thread.run_sync(self.read_sync, fn, limiter=self.db_limiter)

    async def version(self, table: str) -> int:
        return await self.read(lambda conn: state.table_version(conn, table=table))

    async def poll_versions(self) -> None:
        """Forever: every poll interval, one read of the versions of the tables waited on, so
        changes made through other replicas wake this process's long-polls."""
        interval = self.settings.poll_interval_s
        while not self.changes.closing.is_set():
            await asyncio.sleep(interval)
            watched = self.changes.watched
            if not watched:
                continue
            tables = [name for name in watched if name != due.CHANNEL]
            try:
                versions = await self.read(
                    partial(_versions, tables=tables, following=due.CHANNEL in watched)
                )
            except Exception as exc:
                # a database outage: wake the waiters, whose own next try answers 503
                log.warning("version poll failed: %s: %s", type(exc).__name__, exc)
                self.changes.changed(set(watched))
                await asyncio.sleep(interval * 10)
                continue
            self.changes.versions_read(versions)

    def sweep_once(self) -> int:
        """End what expired on every table; returns how many tables it swept (blocking).

        A table whose sweep fails is logged and left to the next tick, and the tables after it
        are still swept: one bad table must not stop expiry on the others.

        Raises:
            the database's unavailability (no other table can be swept either).
        """
        due = self.read_sync(state.tables_due_for_sweep)
        swept = 0
        for table in due:
            try:
                self.transact_sync(partial(expiry.sweep, table=table))
            except Exception as exc:
                if is_unavailable(exc):
                    raise
                log.exception("sweep of %s failed; the next tick tries it again", table)
                continue
            swept += 1
        return swept


def _versions(conn: Connection, *, tables: list[str], following: bool) -> dict[str, object]:
    """The versions of `tables`, and with `following` the marker of the due partitions."""
    versions: dict[str, object] = {}
    if tables:
        versions.update(state.table_versions(conn, tables=tables))
    if following:
        versions[due.CHANNEL] = due.marker(conn)
    return versions
