"""What one service process shares between requests: settings, engine, metrics, the notifier.

`Runtime.transact(fn)` is how a route runs one protocol call: one transaction
(`db.run_transaction`), then the committed transitions are counted, logged and announced to the
long-polls waiting in this process. Long-polls in other replicas see them by polling the
table's version (`LAKELOCK_POLL_INTERVAL_S`).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import Any, TypeVar

from sqlalchemy import Engine
from sqlalchemy.engine import Connection

from service import leases
from service.db import run_transaction
from service.metrics import Metrics
from service.settings import Settings

__all__ = ["Notifier", "Runtime"]

log = logging.getLogger("lakelock.lease")
T = TypeVar("T")


class Notifier:
    """Wakes this process's long-polls on a state change, and all of them at shutdown."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._generation = 0
        self.closing = threading.Event()

    def notify(self) -> None:
        with self._cond:
            self._generation += 1
            self._cond.notify_all()

    def wait(self, timeout: float) -> None:
        with self._cond:
            seen = self._generation
            self._cond.wait_for(
                lambda: self._generation != seen or self.closing.is_set(), max(timeout, 0.0)
            )

    def close(self) -> None:
        """Shutdown: every pending long-poll answers now with what it has."""
        self.closing.set()
        self.notify()


class Runtime:
    def __init__(self, settings: Settings, engine: Engine) -> None:
        self.settings = settings
        self.engine = engine
        self.metrics = Metrics()
        self.notifier = Notifier()

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
        self.notifier.notify()

    def transact(self, fn: Callable[[Connection], T]) -> T:
        return run_transaction(self.engine, fn, on_commit=self._committed)

    def read(self, fn: Callable[[Connection], T]) -> T:
        with self.engine.connect() as conn:
            return fn(conn)

    def version(self, table: str) -> int:
        return self.read(lambda conn: leases.table_version(conn, table=table))

    def wait_for_change(
        self, table: str, *, seen: int, deadline: float, retry_at: float | None = None
    ) -> None:
        """Block until `table`'s version moves past `seen`, `retry_at` or `deadline` passes,
        or the process shuts down; whichever comes first."""
        poll = self.settings.poll_interval_s
        while not self.notifier.closing.is_set():
            left = deadline - time.monotonic()
            if left <= 0 or (retry_at is not None and time.monotonic() >= retry_at):
                return
            self.notifier.wait(min(poll, left))
            if self.version(table) != seen:
                return

    def sweep_once(self) -> int:
        """End what expired on every table; returns how many tables it swept."""
        due = self.read(leases.tables_due_for_sweep)
        for table in due:
            self.transact(lambda conn, table=table: leases.sweep(conn, table=table))
        return len(due)
