"""Prometheus metrics of one service process (each app gets its own registry).

Lease transitions are counted from the audit events a committed transaction recorded, so the
metrics and the trail cannot disagree; refusals that change nothing are counted by the API.
With several uvicorn workers, each worker exposes its own counters: scrape each task, or
aggregate by task in Prometheus.
"""

from __future__ import annotations

from typing import Any

from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest

__all__ = ["Metrics"]

_HOLD_BUCKETS = (0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600, 1800, 3600)


class Metrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        r = self.registry
        self.grants = Counter("lakelock_grants", "Leases granted", ["kind"], registry=r)
        self.denials = Counter(
            "lakelock_denials", "Lease requests refused", ["kind", "reason"], registry=r
        )
        self.expiries = Counter("lakelock_expiries", "Leases expired", ["kind"], registry=r)
        self.ends = Counter("lakelock_lease_ends", "Leases ended", ["kind", "end"], registry=r)
        self.renewals = Counter("lakelock_renewals", "Successful renews", ["kind"], registry=r)
        self.renew_failures = Counter(
            "lakelock_renew_failures", "Renews refused, by outcome", ["outcome"], registry=r
        )
        self.intents = Counter("lakelock_intents_opened", "Intents opened (drains)", registry=r)
        self.hold = Histogram(
            "lakelock_lease_hold_seconds",
            "How long leases were held, from grant to release, expiry or revoke",
            ["kind"],
            buckets=_HOLD_BUCKETS,
            registry=r,
        )
        self.latency = Histogram(
            "lakelock_request_duration_seconds",
            "HTTP request latency",
            ["method", "route", "status"],
            registry=r,
        )

    def observe_events(self, events: list[dict[str, Any]]) -> None:
        """Count the transitions of one committed transaction."""
        for event in events:
            name, kind = event["event"], event.get("kind") or "none"
            detail = event.get("detail") or {}
            if name == "lease.acquired":
                self.grants.labels(kind).inc()
            elif name == "intent.opened":
                self.intents.inc()
            elif name == "lease.renew_failed":
                self.renew_failures.labels(detail.get("outcome", "unknown")).inc()
            elif name in ("lease.released", "lease.expired", "lease.revoked"):
                end = name.removeprefix("lease.")
                self.ends.labels(kind, end).inc()
                if end == "expired":
                    self.expiries.labels(kind).inc()
                if "held_s" in detail:
                    self.hold.labels(kind).observe(float(detail["held_s"]))

    def render(self) -> bytes:
        return generate_latest(self.registry)
