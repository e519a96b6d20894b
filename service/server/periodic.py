"""The service's background work: a daemon thread per job and process that calls it every
interval until the service stops. Two run in each replica:

    sweeper(runtime)                  ends what expired on every table, every
                                      LAKELOCK_SWEEP_INTERVAL_S, so the trail, the metrics and
                                      long-polls see expiries on tables nobody asks about
                                      (docs/design.md §3)
    pruner(engine, settings, metrics) service.lock.retention.prune every
                                      LAKELOCK_PRUNE_INTERVAL_S, counted in the metrics
                                      (service.server.retention)
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

from service.lock.db import driver_message, is_unavailable
from service.server.runtime import Runtime

__all__ = ["Periodic", "sweeper"]

log = logging.getLogger("lakelock.service")


class Periodic:
    """Calls `work()` every `interval_s` (the first time after `first_wait_s`, by default one
    interval) on a daemon thread, from `start()` until `signal()`.

    A failed call is logged and the next tick tries again: a database outage is one warning a
    tick, never a traceback a tick, and never the end of the work.
    """

    def __init__(
        self,
        name: str,
        work: Callable[[], object],
        *,
        interval_s: float,
        first_wait_s: float | None = None,
        thread: str,
        logger: logging.Logger = log,
    ) -> None:
        self.name = name
        self._work = work
        self._interval_s = interval_s
        self._first_wait_s = interval_s if first_wait_s is None else first_wait_s
        self._log = logger
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=thread, daemon=True)

    def start(self) -> None:
        self._thread.start()

    def signal(self) -> None:
        """Asks the thread to end after the call in progress (which may watch `wait`)."""
        self._stop.set()

    def join(self, timeout: float = 5.0) -> None:
        """Waits for the thread to end; several threads are signalled first, then joined."""
        self._thread.join(timeout)

    def wait(self, seconds: float) -> bool:
        """Sleeps `seconds`, or less when `stop()` is called: True then."""
        return self._stop.wait(seconds)

    def _run(self) -> None:
        wait = self._first_wait_s
        while not self._stop.wait(wait):
            wait = self._interval_s
            try:
                self._work()
            except Exception as exc:
                if is_unavailable(exc):
                    self._log.warning(
                        "%s skipped, database unavailable: %s", self.name, driver_message(exc)
                    )
                else:
                    self._log.exception("%s failed", self.name)


def sweeper(runtime: Runtime) -> Periodic:
    """`runtime.sweep_once()` every LAKELOCK_SWEEP_INTERVAL_S."""
    return Periodic(
        "sweep",
        runtime.sweep_once,
        interval_s=runtime.settings.sweep_interval_s,
        thread="lakelock-sweeper",
    )
