"""A run's backpressure (docs/jobs.md §3): the partitions its plan found past the hard bound
have their writers held, under the run's claim, until the group that compacts each is granted.

    pressure = Backpressure(client, config, report, plan, claim, clock)
    pressure.hold(group)       before each group: asks once, then counts each partition's wait
    pressure.skipped(group)    a group that compacted nothing lets its partitions go now
    pressure.let_go()          after the groups: what is still held
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from compactor.config import TableConfig
from compactor.plan import Group, Plan
from compactor.report import RunReport
from service.client import Lease, LeaseClient
from service.wire.errors import LakelockError

__all__ = ["Backpressure"]

log = logging.getLogger(__name__)


class Backpressure:
    """The run's backpressure (docs/jobs.md §3): the partitions its plan found past the hard
    bound, which its groups rewrite, have their writers held from before the first group until
    the group that compacts each one is granted its lease; a group that is skipped lets its
    partitions go at once, what is left is let go when the groups end. The service keeps them
    held as long as the claim, so one ask suffices. Only under a claim (a live compactor), with
    `plan.backpressure`, and with partition scope (a whole-table lease holds every writer
    anyway); a service that refuses it is logged, the run goes on. The seconds each partition
    was held this way, until its group began, are in `partition_hold_s` beside its group's."""

    def __init__(
        self,
        client: LeaseClient,
        config: TableConfig,
        report: RunReport,
        the_plan: Plan,
        claim: Lease | None,
        clock: Callable[[], float],
    ) -> None:
        self.client, self.config, self.report, self.claim = client, config, report, claim
        self.clock = clock
        wanted = claim is not None and config.plan.backpressure and the_plan.whole_table is None
        self.over = dict(the_plan.over_bound) if wanted else {}
        self.asked = False
        self.unsure = False  # asked, and the answer was lost: let go in any case
        self.since = 0.0
        self.waiting: set[str] = set()  # held, their group not begun yet

    def hold(self, group: Group) -> None:
        """Before each group: the first time, ask the service to hold the partitions; then
        count each held partition's wait until its group begins."""
        if not self.asked and self.over and self.claim is not None:
            self._ask()
        self._count(set(group.partitions or ()) & self.waiting)

    def _ask(self) -> None:
        assert self.claim is not None
        self.asked = True
        reason = "; ".join(f"{name}: {why}" for name, why in self.over.items())
        try:
            got = self.client.hold_back(
                self.config.name,
                claim_id=self.claim.lease_id,
                holder=self.report.holder,
                partitions=list(self.over),
                reason=reason[:1024],
            )
        except LakelockError as exc:
            self.unsure = True
            log.warning("%s: backpressure not applied: %s", self.config.name, exc)
            return
        if got.off is not None:
            log.info("%s: %s is switched off: writers not held", self.config.name, got.off)
            return
        self.since = self.clock()
        self.report.backpressure = list(got.partitions)
        self.waiting = set(got.partitions)
        log.warning(
            "%s: backpressure: holding the writers of %s until compacted (%s)",
            self.config.name,
            ", ".join(got.partitions),
            reason,
        )

    def _count(self, names: set[str]) -> None:
        self.report.add_hold(names, self.clock() - self.since)
        self.waiting -= names

    def skipped(self, group: Group) -> None:
        """A group that compacted nothing lets its held partitions go now, not at the run's
        end."""
        names = self.report.backpressured(group.partitions)
        if names:
            self._withdraw(sorted(names))

    def let_go(self) -> None:
        """After the groups: what is still held (groups left for the next run, a failure)."""
        self._count(set(self.waiting))
        if self.report.backpressure or self.unsure:
            self._withdraw(None)

    def _withdraw(self, partitions: list[str] | None) -> None:
        try:
            self.client.let_go(self.config.name, holder=self.report.holder, partitions=partitions)
        except LakelockError as exc:
            # they end with the claim at the latest
            log.warning("%s: backpressure not let go: %s", self.config.name, exc)
