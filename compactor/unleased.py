"""The steps of a plan that hold no writer (expire_snapshots, remove_orphan_files: see
compactor.plan), run without a lease once the groups ended.

    unleased(spark, client, config, plan, report, state, claim, before_step, stop) -> bool
        True unless one failed; none while an operator switched maintenance off or once the
        compactor is stopping

In a catalog front, snapshot removal is fenced by the table's claim (docs/catalog-front.md):
the fleet's own, else one taken for these steps.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from compactor.claim import Held, take
from compactor.config import TableConfig
from compactor.groups import stopped_before
from compactor.plan import Plan, Step
from compactor.procedure import ProcedureFailed, run_step
from compactor.report import Outcome, RunReport
from jobkit.spark import rest_catalog
from service.client import Lease, LeaseClient

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

__all__ = ["unleased"]

log = logging.getLogger(__name__)


def unleased(
    spark: SparkSession,
    client: LeaseClient,
    config: TableConfig,
    the_plan: Plan,
    report: RunReport,
    state: dict[str, Any],
    *,
    claim: Lease | None,
    before_step: Callable[[Step], None] | None,
    stop: threading.Event | None = None,
) -> bool:
    """The steps that hold no writer (see compactor.plan), run without a lease; an operator's
    `maintenance: disabled` still stops them. True unless one failed (the run may settle).

    A stopping compactor (`stop` set) starts none of them: a run stopped before any group (a
    plan of these steps only) is skipped, as one stopped before its first group is."""
    if stop is not None and stop.is_set():
        return bool(report.groups) or stopped_before(config, report, ())
    if not the_plan.unleased:
        return True
    if (state.get("switch") or {}).get("maintenance") == "disabled":
        log.warning(
            "%s: maintenance is disabled: no %s",
            config.name,
            "/".join(s.procedure for s in the_plan.unleased),
        )
        report.outcome, report.reason = Outcome.SKIPPED, "maintenance_off"
        return False
    properties = {"lakelock.run-uid": report.run_uid, "lakelock.mode": str(the_plan.mode)}
    if rest_catalog(spark, config.name) is None:
        return _unfenced(spark, config, the_plan, report, properties, before_step=before_step)
    # a catalog front fences snapshot removal by the table's claim (docs/catalog-front.md): the
    # fleet's own, else one taken for these steps (it holds no writer)
    if claim is not None:
        properties["lakelock.lease-id"] = claim.lease_id
        return _unfenced(spark, config, the_plan, report, properties, before_step=before_step)
    got = take(client, config.name, holder=report.holder, ttl_s=_OWN_CLAIM_TTL_S)
    if isinstance(got, Held):
        log.info(
            "%s: claimed by %s: no %s",
            config.name,
            got.holder,
            "/".join(s.procedure for s in the_plan.unleased),
        )
        return True
    with got:
        properties["lakelock.lease-id"] = got.lease.lease_id
        return _unfenced(spark, config, the_plan, report, properties, before_step=before_step)


# the claim a run without one takes for its steps without a lease, renewed while they run
_OWN_CLAIM_TTL_S = 60.0


def _unfenced(
    spark: SparkSession,
    config: TableConfig,
    the_plan: Plan,
    report: RunReport,
    properties: dict[str, str],
    *,
    before_step: Callable[[Step], None] | None,
) -> bool:
    for step in the_plan.unleased:
        if before_step is not None:
            before_step(step)
        started = time.monotonic()
        try:
            output = run_step(spark, table=config.name, step=step, properties=properties)
        except ProcedureFailed as exc:
            log.error("%s: %s", config.name, exc)
            report.outcome, report.error = Outcome.FAILED, exc.message
            report.steps.append({**step.as_dict(), "error": exc.message})
            return False
        report.steps.append(
            {**step.as_dict(), "output": output, "duration_s": round(time.monotonic() - started, 3)}
        )
        log.info("%s: %s done without a lease: %s", config.name, step.procedure, output)
    return True
