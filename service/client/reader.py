"""A reader's hold on snapshot expiry, kept up from a thread: for a job that streams out of a
lakelock-managed table (`spark.readStream.format("iceberg")`).

    with ReaderLease(client, "lake.db.orders", "summary@host-1", ttl_s=600) as hold:
        hold.advance(first_snapshot_id)          # before the query reads
        ...                                      # then at each progress (jobkit.reader.follow)
        hold.advance(snapshot_id, snapshots_behind=3)
    # released on exit

While the hold is live, the compactor's `expire_snapshots` keeps the reader's snapshot and every
later one. The thread puts the hold again every `ttl_s / 3` with the latest position; a
transient failure (the service unreachable) is logged and tried again sooner, and a hold the
service could not renew within its TTL lapses there (audited as `reader.expired`), so a reader
that stops holds nothing back for longer than its TTL. Any other refusal (a bad position, a bad
token) is raised from the next `advance`.
"""

from __future__ import annotations

import logging
import threading
from types import TracebackType

from service.client.lease_client import LeaseClient
from service.wire.errors import TRANSIENT

__all__ = ["ReaderLease"]

log = logging.getLogger(__name__)


class ReaderLease:
    def __init__(self, client: LeaseClient, table: str, reader: str, *, ttl_s: float) -> None:
        self.client, self.table, self.reader, self.ttl_s = client, table, reader, ttl_s
        self._position: tuple[int, int | None] | None = None
        self._failure: BaseException | None = None
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    @property
    def snapshot_id(self) -> int | None:
        return None if self._position is None else self._position[0]

    def advance(self, snapshot_id: int, *, snapshots_behind: int | None = None) -> None:
        """Move the hold to `snapshot_id` (put at once; the first call starts the thread).

        Raises:
            service.wire.errors.LakelockError: the service refused this or an earlier put
                (not a transient failure: those are retried).
        """
        with self._lock:
            if self._failure is not None:
                raise self._failure
            self._position = (snapshot_id, snapshots_behind)
        self._put()
        if self._thread is None:
            self._thread = threading.Thread(
                target=self._keep, name=f"lakelock-reader-{self.reader}", daemon=True
            )
            self._thread.start()

    def close(self) -> None:
        """Stop the thread and release the hold (a failed release lapses by the TTL)."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=10)
        if self._position is None:
            return
        try:
            self.client.release_reader(self.table, self.reader)
        except TRANSIENT as exc:
            log.warning(
                "reader %s not released (it lapses in %ss): %s", self.reader, self.ttl_s, exc
            )

    def __enter__(self) -> ReaderLease:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def _put(self) -> None:
        with self._lock:
            position = self._position
        assert position is not None
        self.client.hold_reader(
            self.table,
            self.reader,
            snapshot_id=position[0],
            ttl_s=self.ttl_s,
            snapshots_behind=position[1],
        )

    def _keep(self) -> None:
        wait = self.ttl_s / 3
        while not self._stop.wait(wait):
            try:
                self._put()
                wait = self.ttl_s / 3
            except TRANSIENT as exc:
                log.warning("reader %s: hold not renewed, trying again: %s", self.reader, exc)
                wait = min(self.ttl_s / 9, 5.0)
            except Exception as exc:  # a refusal: raised to the job at its next advance
                log.error("reader %s: hold refused: %s", self.reader, exc)
                with self._lock:
                    self._failure = exc
                return
