"""Claims (docs/design.md §5) and the backpressure a compactor holds under its claim
(docs/jobs.md §3)."""

from __future__ import annotations

from datetime import timedelta
from typing import Annotated

from fastapi import APIRouter, Query
from pydantic import AfterValidator

from service.lock import intents, leases
from service.server.auth import JobDep, caller
from service.server.routes.common import (
    WRITE,
    RuntimeDep,
    TableName,
    check_partitions,
    check_ttl,
    problems,
)
from service.wire import (
    HOLDER_PATTERN,
    Backpressure,
    BackpressureBody,
    ClaimBody,
    Lease,
    PartitionName,
    partition_name,
)
from service.wire.errors import Refused

__all__ = ["router"]

router = APIRouter(tags=["leases"])


@router.post(
    "/v1/tables/{table}/claim",
    status_code=201,
    responses={**WRITE, **problems(409, 410)},
)
async def claim(table: TableName, body: ClaimBody, rt: RuntimeDep, who: JobDep) -> Lease:
    """Claim the table for one compactor process (docs/design.md §5): a lease of kind `claim`,
    exclusive among claims only, on the whole table. It never waits (`wait_s` is ignored): a
    claim another holder has is a 409 `claim-held` naming the holder and the seconds left.
    Renew, release and revoke it as any lease, at `/v1/leases/{lease_id}`."""
    check_ttl(rt, body.ttl_s)
    try:
        return await rt.transact(
            lambda conn: leases.acquire_claim(
                conn,
                table=table,
                holder=body.holder,
                ttl=timedelta(seconds=body.ttl_s),
                request_id=body.request_id,
                caller=caller(who),
            )
        )
    except Refused as exc:
        rt.metrics.denials.labels("claim", exc.slug, "table").inc()
        raise


@router.post(
    "/v1/tables/{table}/backpressure",
    responses={**WRITE, **problems(404, 409, 410)},
)
async def hold_back(
    table: TableName, body: BackpressureBody, rt: RuntimeDep, who: JobDep
) -> Backpressure:
    """Hold the commits that touch `partitions` until `holder` compacts them (docs/jobs.md
    §3): a compactor whose plan found them past their debt bound, under its live claim on the
    table (`holder`: the claim's holder or a run under it, `<claim holder>/<run>`). They stay
    held as long as the claim (each renew extends them); each ends with `holder`'s maintenance
    grant covering it, a `DELETE`, or the claim's release, revoke or expiry. With the table's
    `backpressure` or `maintenance` switched off, nothing is held (`off` says which)."""
    check_partitions(rt, body.partitions)
    return await rt.transact(
        lambda conn: intents.hold_back(
            conn,
            table=table,
            claim_id=body.claim_id,
            holder=body.holder,
            partitions=body.partitions,
            reason=body.reason,
            caller=caller(who),
        )
    )


# a query string is text, so "-1.5e-9" is a string too: the name's rule, stated in openapi.json
# as for the bodies' partitions, is what refuses it
PartitionParam = Annotated[PartitionName, AfterValidator(partition_name)]


@router.delete("/v1/tables/{table}/backpressure", responses=WRITE)
async def let_go(
    table: TableName,
    holder: Annotated[
        str,
        Query(pattern=HOLDER_PATTERN, max_length=255, description="the holder that asked for it"),
    ],
    rt: RuntimeDep,
    who: JobDep,
    partition: Annotated[
        list[PartitionParam] | None,
        Query(description="only these partitions (repeat it); without it, every one"),
    ] = None,
) -> Backpressure:
    """End `holder`'s backpressure on the table (a run that leaves a partition it held
    uncompacted: a group skipped, the run ended): its commits are granted again at once.
    Answers the partitions let go."""
    return await rt.transact(
        lambda conn: intents.let_go(
            conn, table=table, holder=holder, caller=caller(who), partitions=partition
        )
    )
