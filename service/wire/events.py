"""The names of the audit events: every `event` of `GET /v1/events` is one of these.

    EventName.LEASE_ACQUIRED == "lease.acquired"     a str: compared, stored and sent as its name

What each one records is in docs/api.md (`GET /v1/events`) and docs/design.md §3; the lock core
writes them (`service.lock.audit.record` takes nothing else).
"""

from __future__ import annotations

from enum import StrEnum, unique

__all__ = ["EventName"]


@unique
class EventName(StrEnum):
    # a lease of any kind (commit, maintenance, claim): its grant, refused renew and end
    LEASE_ACQUIRED = "lease.acquired"
    LEASE_RENEW_FAILED = "lease.renew_failed"
    LEASE_RELEASED = "lease.released"
    LEASE_EXPIRED = "lease.expired"
    LEASE_REVOKED = "lease.revoked"
    # intents: a maintenance request's drain, a compactor's backpressure (docs/jobs.md §3)
    INTENT_OPENED = "intent.opened"
    BACKPRESSURE_ON = "backpressure.on"
    INTENT_EXPIRED = "intent.expired"
    INTENT_WITHDRAWN = "intent.withdrawn"
    INTENT_FULFILLED = "intent.fulfilled"
    # the operators' switch, the compactors' and ingest jobs' reports
    SWITCH_SET = "switch.set"
    RUN_REPORTED = "run.reported"
    INGEST_GAP = "ingest.gap"
    # the holds of jobs streaming out of a table
    READER_HELD = "reader.held"
    READER_RELEASED = "reader.released"
    READER_EXPIRED = "reader.expired"
    # commits through the catalog front (docs/catalog-front.md)
    CATALOG_COMMIT = "catalog.commit"
    CATALOG_REFUSED = "catalog.refused"
    # a table the front dropped or renamed: its lock state forgotten or moved (service.lock.drops)
    CATALOG_DROPPED = "catalog.dropped"
    CATALOG_RENAMED = "catalog.renamed"
