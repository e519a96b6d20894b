"""The ingest gate: a commit lease around each micro-batch write to an Iceberg table.

A `foreachBatch` function enters the gate before its MERGE reads the table and leaves it after
the commit (see service.lock.leases for the protocol):

    gate = Gate(client, holder=f"ingest:{query_id}", job_groups=SparkJobGroups(spark))
    with gate.commit("cat.db.events") as gate_pass:
        gate_pass.check()            # right before the MERGE, and again in the commit path
        run_merge(batch)
    log.info(json.dumps(gate_pass.as_dict()))

    with gate.commit("cat.db.events", partitions=["dt=2024-06-20/hr=13"]) as gate_pass:
        ...                          # a lease on those partitions only (docs/design.md §4)
        gate_pass.wrote({"dt=2024-06-20/hr=13": (1, 1)})   # what the commit added, per partition

Entering blocks until a commit lease is granted, long-polling the service and retrying while
ingest is paused, maintenance holds the table, or the service is unreachable; never longer than
`max_hold_s`. Then `policy` decides: `fail` raises `GateTimeout` (the streaming query fails and
restarts later), `proceed` commits without a lease and relies on Iceberg's commit validation.

While the body runs a `Renewer` keeps the lease and the body's Spark work runs in a job group.
When the lease is lost the group is cancelled, `check()` raises `LeaseLost`, and leaving the
gate raises `LeaseLost` even if the body returned, so the batch is retried from the checkpoint.
Under `proceed` a lost lease is only logged: that policy never stops the stream. The lease is
released on every exit; a failed release is logged (the lease then expires by its TTL).

What the commit wrote: the body may tell the pass, per partition, the data and delete files
its commit added (`wrote`, read from the commit's snapshot summary). When the pass ends
`committed`, the release carries them (`LeaseClient.release(lease, written=...)`), and the
service adds them to the partitions' compaction debt: it knows the moment a partition is due and
wakes a compactor that follows the stream (docs/jobs.md §3). Only partitions the lease covers are
sent; a release the service refuses for them is sent again without them, so the lease never
outlives the pass because of its counts.
"""

from __future__ import annotations

import logging
import threading
import time
import uuid
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

from service.client import Lease, LeaseClient, LeaseLost, NotGranted, Renewer
from service.wire.errors import InvalidRequest
from service.wire.text import sample

__all__ = [
    "Gate",
    "GateError",
    "GatePass",
    "GateTimeout",
    "JobGroups",
    "LeaseLost",
    "Outcome",
    "Policy",
]

log = logging.getLogger(__name__)

Policy = Literal["fail", "proceed"]
"""What the gate does when it cannot hold a lease: `fail` raises, `proceed` commits anyway."""

Outcome = Literal["committed", "failed", "lease_lost", "proceeded_without_lease", "timed_out"]
"""How a pass through the gate ended; None while it is still open."""


class JobGroups(Protocol):
    """Where the body's Spark jobs run, so a lost lease can cancel them.

    The streaming job adapts `SparkContext.setJobGroup(group, desc, interruptOnCancel=True)`,
    `clearJobGroup()` and `cancelJobGroup(group)`.
    """

    def set(self, group: str) -> None: ...

    def clear(self) -> None: ...

    def cancel(self, group: str) -> None: ...


class _NoJobGroups:
    def set(self, group: str) -> None:
        pass

    def clear(self) -> None:
        pass

    def cancel(self, group: str) -> None:
        pass


class GateError(Exception):
    """The gate could not let a micro-batch commit safely; fail the batch, do not commit."""


class GateTimeout(GateError):
    """No commit lease within `max_hold_s`. Let the streaming query fail and restart later;
    look at the table's switch and maintenance lease (GET /v1/tables/{table}) to see why."""

    def __init__(self, message: str, *, gate_pass: GatePass) -> None:
        super().__init__(message)
        self.gate_pass = gate_pass


@dataclass
class GatePass:
    """One pass through the gate: what it waited for, what it held, how it ended.

    gate_pass.lease          # the commit lease, or None when proceeding without one
    gate_pass.partitions     # the partitions asked for, or None for the whole table
    gate_pass.check()        # raises LeaseLost if the lease is no longer safe to commit under
    gate_pass.wrote({"dt=2024-06-20/hr=13": (2, 1)})  # data, delete files the commit added
    gate_pass.as_dict()      # for the job's JSON log line; "scope": names or "table"
    """

    table: str
    holder: str
    request_id: str
    policy: Policy
    partitions: tuple[str, ...] | None = None
    lease: Lease | None = None
    waited_s: float = 0.0
    wait_reasons: list[str] = field(default_factory=list)
    # of waited_s, the seconds a compactor's backpressure held the pass (docs/jobs.md §3)
    backpressure_s: float = 0.0
    held_s: float = 0.0
    outcome: Outcome | None = None
    lease_calls_s: float = 0.0
    lost_reason: str | None = None
    # per partition, the data and delete files the commit added (None: not told)
    written: dict[str, tuple[int, int]] | None = None
    _renewer: Renewer | None = field(default=None, repr=False)
    _warned_lost: bool = field(default=False, repr=False)
    # the wait counted so far, and the reason of the last refusal: what the time since was for
    _wait_mark: tuple[float, str | None] = field(default=(0.0, None), repr=False)

    def check(self) -> None:
        """Raise LeaseLost unless the lease can still be committed under.

        Call it right before the MERGE and in the commit path. Without a lease (policy
        `proceed`) it does nothing; under `proceed` a lost lease is logged once, not raised.

        Raises:
            LeaseLost: the lease was revoked, expired, or not renewed within its deadline.
        """
        reason = self._lost()
        if reason is None:
            return
        if self.policy == "proceed":
            if not self._warned_lost:
                self._warned_lost = True
                log.warning(
                    "commit lease on %s lost (%s); policy proceed: committing anyway, "
                    "Iceberg's validation decides",
                    self.table,
                    reason,
                )
            return
        raise LeaseLost(
            f"commit lease on {self.table} lost: {reason}", lease=self.lease, gate_pass=self
        )

    def wrote(self, counts: Mapping[str, tuple[int, int]]) -> None:
        """Tell the pass what its commit added: per partition name, (data files, delete files).
        Sent with the lease's release when the pass ends `committed`; partitions outside a
        scoped lease are left out (the service keeps debt only under the lease's scope)."""
        kept = {
            name: (int(data), int(deletes))
            for name, (data, deletes) in counts.items()
            if self.partitions is None or name in self.partitions
        }
        left = len(counts) - len(kept)
        if left:
            log.debug("%s: %d partitions outside the lease's scope not sent", self.table, left)
        self.written = kept

    def as_dict(self) -> dict[str, Any]:
        """A JSON-ready summary for the job's log line."""
        return {
            "table": self.table,
            "holder": self.holder,
            "request_id": self.request_id,
            "lease_id": None if self.lease is None else self.lease.lease_id,
            "scope": "table" if self.partitions is None else list(self.partitions),
            "waited_s": round(self.waited_s, 3),
            "wait_reasons": list(self.wait_reasons),
            "backpressure_s": round(self.backpressure_s, 3),
            "held_s": round(self.held_s, 3),
            "outcome": self.outcome,
            "lease_calls_s": round(self.lease_calls_s, 3),
            "lost_reason": self.lost_reason,
            "written_partitions": None if self.written is None else len(self.written),
        }

    def _lost(self) -> str | None:
        """Why the lease can no longer be committed under, or None."""
        renewer = self._renewer
        if renewer is None or renewer.safe_to_commit():
            return None
        reason = renewer.lost_reason or (
            f"renew-deadline: no renew succeeded within {renewer.renew_deadline_s:.1f}s"
        )
        self.lost_reason = reason
        return reason

    def _note(self, reason: str | None, waited_s: float = 0.0) -> None:
        """A refusal for `reason` after `waited_s` of waiting in all: the time since the last
        refusal was spent on the ask it refused, so it counts toward that ask's reason."""
        mark, last = self._wait_mark
        if last == "backpressure":
            self.backpressure_s += max(0.0, waited_s - mark)
        self._wait_mark = (waited_s, reason)
        if reason and reason not in self.wait_reasons:
            self.wait_reasons.append(reason)
        if reason == "backpressure" and last != "backpressure":
            log.warning(
                "commit to %s held back: partitions over their compaction debt bound are being "
                "compacted first (%s)",
                self.table,
                "table" if self.partitions is None else sample(self.partitions, 5),
            )


class Gate:
    """Holds a commit lease around each micro-batch write. See the module docstring.

    Gate(client, holder="ingest:q1")                                # fail after 300 s
    Gate(client, holder="ingest:q1", policy="proceed", max_hold_s=60)
    Gate(client, holder="ingest:q1", job_groups=SparkJobGroups(spark), ttl_s=30)
    Gate(client, holder="ingest:q1", stop=stopping)   # a stop ends a wait for the lease
    """

    def __init__(
        self,
        client: LeaseClient,
        *,
        holder: str,
        ttl_s: float = 30.0,
        max_hold_s: float = 300.0,
        policy: Policy = "fail",
        poll_s: float = 10.0,
        job_groups: JobGroups | None = None,
        clock: Callable[[], float] = time.monotonic,
        stop: threading.Event | None = None,
    ) -> None:
        if policy not in ("fail", "proceed"):
            raise ValueError(f"policy must be 'fail' or 'proceed', got {policy!r}")
        if ttl_s <= 0 or max_hold_s < 0 or poll_s <= 0:
            raise ValueError(
                f"need ttl_s > 0, max_hold_s >= 0, poll_s > 0; got {ttl_s}, {max_hold_s}, {poll_s}"
            )
        self.client = client
        self.holder = holder
        self.ttl_s = ttl_s
        self.max_hold_s = max_hold_s
        self.policy: Policy = policy
        self.poll_s = poll_s
        self.job_groups: JobGroups = job_groups if job_groups is not None else _NoJobGroups()
        self.clock = clock
        # set when the job stops: a pass still waiting for its lease ends (Stopped) within
        # the client's STOP_SLICE_S instead of holding the stop up to max_hold_s
        self.stop = stop

    @contextmanager
    def commit(self, table: str, *, partitions: Sequence[str] | None = None) -> Iterator[GatePass]:
        """Hold a commit lease on `table` (on its `partitions` only, named as
        jobkit.partition names them; None for the whole table) for the body; yields its
        `GatePass`.

        Raises:
            GateTimeout: no lease within `max_hold_s` and policy `fail`.
            service.client.Stopped: the gate's `stop` was set while the pass waited (under
                either policy: a stopping job commits nothing without its lease).
            LeaseLost: the lease was lost while the body ran and policy `fail` (also when the
                body returned, or raised because its Spark jobs were cancelled).
            InvalidRequest, Unauthorized, Forbidden: the gate is misconfigured; waiting
                would not help.
            Whatever the body raises.
        """
        gate_pass = GatePass(
            table=table,
            holder=self.holder,
            request_id=uuid.uuid4().hex,
            policy=self.policy,
            partitions=None if partitions is None else tuple(partitions),
        )
        gate_pass.lease = self._acquire(gate_pass)
        group = f"lakelock-commit-{gate_pass.request_id}"
        renewer = None
        entered = self.clock()
        try:
            if gate_pass.lease is not None:
                renewer = Renewer(
                    self.client, gate_pass.lease, on_lost=self._on_lost(gate_pass, group)
                )
                gate_pass._renewer = renewer
            self.job_groups.set(group)
            yield gate_pass
        except Exception as exc:
            lost = gate_pass._lost()
            gate_pass.outcome = "lease_lost" if lost else "failed"
            if lost and self.policy == "fail" and not isinstance(exc, LeaseLost):
                # the body most likely failed because its jobs were cancelled: name the cause
                raise LeaseLost(
                    f"commit lease on {table} lost while the batch ran: {lost}",
                    gate_pass=gate_pass,
                ) from exc
            raise
        except BaseException:
            gate_pass.outcome = "failed"
            raise
        else:
            lost = gate_pass._lost()
            if lost is not None:
                gate_pass.outcome = "lease_lost"
                if self.policy == "fail":
                    raise LeaseLost(
                        f"commit lease on {table} lost while the batch ran: {lost}; "
                        "failing the batch so it is replayed",
                        gate_pass=gate_pass,
                    )
                log.warning(
                    "commit lease on %s lost while the batch ran (%s); policy proceed",
                    table,
                    lost,
                )
            elif gate_pass.lease is None:
                gate_pass.outcome = "proceeded_without_lease"
            else:
                gate_pass.outcome = "committed"
        finally:
            gate_pass.held_s = self.clock() - entered
            self._leave(gate_pass, renewer)

    # -- entering -------------------------------------------------------------------------------

    def _acquire(self, gate_pass: GatePass) -> Lease | None:
        """The lease, or None when the policy is `proceed` and `max_hold_s` passed."""
        try:
            got = self.client.acquire_until(
                "commit",
                gate_pass.table,
                holder=self.holder,
                ttl_s=self.ttl_s,
                within_s=self.max_hold_s,
                # one id for the whole pass: a grant whose answer was lost is returned again
                request_id=gate_pass.request_id,
                partitions=gate_pass.partitions,
                poll_s=self.poll_s,
                retry_unavailable=True,
                on_wait=lambda waited: gate_pass._note(waited.reason, waited.waited_s),
                clock=self.clock,
                stop=self.stop,
            )
        except NotGranted as exc:
            gate_pass.waited_s = exc.waited_s
            gate_pass.lease_calls_s += exc.calls_s
            gate_pass._note(None, exc.waited_s)
            return self._timed_out(gate_pass)
        gate_pass.waited_s = got.waited_s
        gate_pass.lease_calls_s += got.calls_s
        gate_pass._note(None, got.waited_s)  # the last ask, which was granted
        return got.lease

    def _timed_out(self, gate_pass: GatePass) -> None:
        why = ", ".join(gate_pass.wait_reasons) or "no answer"
        message = (
            f"no commit lease on {gate_pass.table} after {gate_pass.waited_s:.1f}s "
            f"(max_hold_s={self.max_hold_s:g}); waited for: {why}"
        )
        if self.policy == "fail":
            gate_pass.outcome = "timed_out"
            raise GateTimeout(message, gate_pass=gate_pass)
        log.warning("%s; policy proceed: committing without a lease", message)
        return None

    # -- leaving --------------------------------------------------------------------------------

    def _on_lost(self, gate_pass: GatePass, group: str) -> Callable[[str], None]:
        def on_lost(reason: str) -> None:
            gate_pass.lost_reason = reason
            if self.policy == "proceed":
                log.warning(
                    "commit lease on %s lost (%s); policy proceed: batch continues",
                    gate_pass.table,
                    reason,
                )
                return
            log.error(
                "commit lease on %s lost (%s); cancelling job group %s",
                gate_pass.table,
                reason,
                group,
            )
            self.job_groups.cancel(group)

        return on_lost

    def _leave(self, gate_pass: GatePass, renewer: Renewer | None) -> None:
        """Clear the job group, stop renewing, release; log failures, never raise them."""
        try:
            self.job_groups.clear()
        except Exception:
            log.exception("clearing the Spark job group failed")
        if renewer is not None:
            # stop first: a renew racing the release would report the lease lost
            renewer.stop()
        lease = gate_pass.lease
        if lease is None:
            return
        started = self.clock()
        try:
            self._release(gate_pass, lease)
        except Exception:
            # raising here would hide the body's outcome; the lease expires after its TTL
            log.exception(
                "release of commit lease %s on %s failed; it expires in %.0fs",
                lease.lease_id,
                lease.table,
                lease.ttl_s,
            )
        finally:
            gate_pass.lease_calls_s += self.clock() - started

    def _release(self, gate_pass: GatePass, lease: Lease) -> None:
        """Release `lease`, with what the commit wrote when the pass committed (see the module
        docstring); a service that refuses the counts gets a plain release."""
        written = gate_pass.written if gate_pass.outcome == "committed" else None
        if not written:
            self.client.release(lease)
            return
        try:
            self.client.release(lease, written=written)
        except InvalidRequest as exc:
            log.warning(
                "the service refused the counts of the commit to %s (%s); releasing without them",
                gate_pass.table,
                exc,
            )
            self.client.release(lease)
