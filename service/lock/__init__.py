"""The lock core: the protocol as plain functions over a database connection (SQLAlchemy).

    service.lock.rows      the stored rows as typed values
    service.lock.asks      what a transition is asked and what the rules answer (types)
    service.lock.rules     the decisions: pure functions over rows (no database)
    service.lock.refusals  a refused request in words: the exception the client gets
    service.lock.store     the rows in the database: read, written as the rules decided
    service.lock.leases    the lease verbs: acquire, renew, release, revoke
    service.lock.intents   what holds commits back: a drain, backpressure, a turn of the head
    service.lock.expiry    what is live on a table and how things end (expiry, sweep)
    service.lock.switch    the operator switch
    service.lock.state     read-only views (a table's state, a lease)
    service.lock.overview  the lock over every table at once: what the state gauges show
    service.lock.audit     the append-only events, in the caller's transaction
    service.lock.debt      compaction debt as the compactors report it
    service.lock.ingest    what ingest jobs report of their source: lag, skipped offset ranges
    service.lock.readers   holds of jobs streaming out of a table, which expiry keeps back
    service.lock.fence     a catalog front's commit checked against the leases
                           (docs/catalog-front.md)
    service.lock.runs      compactor run reports, the newest few per table
    service.lock.retention deleting events and ended leases past the retention, in batches
    service.lock.db        the schema, the database clock, engines for MySQL and SQLite, and
                           the database's error types (the server maps them, never importing
                           SQLAlchemy)
    service.lock.migrate   Alembic to the head (migrations/)

Each transition locks the table row, decides (rules), stores and audits, in one transaction.
The protocol is written in docs/design.md §3 to §5, and in `service.lock.leases` and
`service.lock.intents`.
"""
