"""The sweeper: a thread per process that ends what expired on every table, every
LAKELOCK_SWEEP_INTERVAL_S, so the trail, the metrics and long-polls see expiries even on tables
nobody is asking about (docs/design.md §3, expiry).

    sweeper = Sweeper(runtime); sweeper.start(); ...; sweeper.stop()
"""

from __future__ import annotations

import logging
import threading

from service.lock.db import driver_message, is_unavailable
from service.server.runtime import Runtime

__all__ = ["Sweeper"]

log = logging.getLogger("lakelock.service")


class Sweeper:
    """Runs `runtime.sweep_once()` every LAKELOCK_SWEEP_INTERVAL_S on a daemon thread until
    `stop()`."""

    def __init__(self, runtime: Runtime) -> None:
        self.runtime = runtime
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="lakelock-sweeper", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self, timeout: float = 5.0) -> None:
        """Ends the thread after the sweep in progress."""
        self._stop.set()
        self._thread.join(timeout)

    def _run(self) -> None:
        while not self._stop.wait(self.runtime.settings.sweep_interval_s):
            try:
                self.runtime.sweep_once()
            except Exception as exc:
                # the next tick tries again; a database outage must not kill the sweeper, nor
                # write a traceback every tick while it lasts
                if is_unavailable(exc):
                    log.warning("sweep skipped, database unavailable: %s", driver_message(exc))
                else:
                    log.exception("sweep failed")
