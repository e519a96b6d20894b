"""The catalog front's answers to requests sent with an Idempotency-Key (Iceberg's REST
specification from 1.11), kept for the key's lifetime (docs/catalog-front.md §4).

    find(conn, key)                                  Stored | None: the answer kept for it
    remember(conn, key, status=200, location=...)    kept; in the commit's own transaction for
                                                     a commit, so an applied commit always
                                                     has its answer; KeyTaken if another
                                                     request kept one first, which must roll
                                                     the transaction back

A key is its token's own: (principal, key), so one token never reads, nor blocks, another's
answers. A key sent again with another request (method, path or body: its `fingerprint`) is
the client's mistake (`KeyReused`). Expired answers go with the retention's batches
(service.lock.retention).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta

from sqlalchemy import and_, delete, insert, select
from sqlalchemy.engine import Connection
from sqlalchemy.exc import IntegrityError
from sqlalchemy.sql.elements import ColumnElement

from service.lock.db import idempotency_t, now
from service.wire.errors import InvalidRequest

__all__ = ["Key", "KeyReused", "KeyTaken", "Stored", "find", "remember"]

_c = idempotency_t.c


@dataclass(frozen=True, slots=True)
class Key:
    """An Idempotency-Key as its request carried it."""

    principal: str
    key: str
    fingerprint: str  # of the request: sha256 of its method, path and body
    lifetime: timedelta


@dataclass(frozen=True, slots=True)
class Stored:
    """The answer kept for a key: its status and body, or the metadata file of a table's."""

    fingerprint: str
    status: int
    body: str | None
    location: str | None


class KeyTaken(Exception):
    """Another request with the same key kept its answer first; answer that one. No
    LakelockError on purpose: a transaction commits what it did before a LakelockError (a
    refusal is recorded), and one that meets this must roll back, its change undone."""


class KeyReused(InvalidRequest):
    """The key was sent before with another request; send a new key for a new request."""


def find(conn: Connection, key: Key) -> Stored | None:
    """The answer kept for `key` (its token's), None when none is, or it expired.

    Raises:
        KeyReused: the answer kept is of another request.
    """
    row = conn.execute(
        select(_c.fingerprint, _c.status, _c.body, _c.location).where(
            _one(key), _c.expires_at > now(conn)
        )
    ).first()
    if row is None:
        return None
    if row.fingerprint != key.fingerprint:
        raise KeyReused(
            f"the Idempotency-Key {key.key} was sent before with another request (method, "
            "path or body); send a new key (a UUIDv7) for a new request"
        )
    return Stored(row.fingerprint, row.status, row.body, row.location)


def remember(
    conn: Connection,
    key: Key,
    *,
    status: int,
    body: str | None = None,
    location: str | None = None,
) -> None:
    """Keep the answer to `key`'s request until its lifetime ends (an expired answer of the
    same key is replaced).

    Raises:
        KeyTaken: a live answer is kept for the key already (a request sent twice at once);
            raised out of the caller's transaction, it rolls it back.
    """
    at = now(conn)
    conn.execute(delete(idempotency_t).where(_one(key), _c.expires_at <= at))
    try:
        conn.execute(
            insert(idempotency_t).values(
                principal=key.principal,
                idempotency_key=key.key,
                fingerprint=key.fingerprint,
                status=status,
                body=body,
                location=location,
                created_at=at,
                expires_at=at + key.lifetime,
            )
        )
    except IntegrityError:
        raise KeyTaken(
            f"another request with the Idempotency-Key {key.key} was answered first"
        ) from None


def _one(key: Key) -> ColumnElement[bool]:
    return and_(_c.principal == key.principal, _c.idempotency_key == key.key)
