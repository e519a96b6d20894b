"""What the catalog front accepts from a client besides commits: names, properties, metadata
size (docs/catalogs.md, "What the front refuses").

    limits = Limits(max_metadata_bytes=..., max_properties=..., ...)   # from the settings
    check_table_properties(limits, {"write.format.default": "parquet"})
    check_name(limits, "events", what="table name")

Each refusal is an InvalidRequest (400) that names the cap or the rule, so the client knows
what to change. A table property that chooses a class (`py-io-impl`, `io-impl`,
`write.py-location-provider.impl`, any `*.impl` or `*-impl` key) is refused outright: pyiceberg
imports the class such a property names, and the service never runs what a client names.

A table property that configures file access or a catalog connection (`s3.endpoint`,
`s3.signer.uri`, `header.Authorization`, `token`, `uri`, ...: `configures_access`) is refused
too: pyiceberg's RestCatalog builds a loaded table's FileIO from the table's properties, so one
job's such property would send every other client's storage traffic, credentials and bearer
token where that job chose. A table stored earlier with one (written by another catalog) is
answered without it (`answered`), for the same reason.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Mapping
from dataclasses import dataclass

from service.wire.errors import InvalidRequest

__all__ = [
    "NAMESPACE_CHARS",
    "NAMESPACE_KEY_CHARS",
    "NAMESPACE_VALUE_CHARS",
    "Budget",
    "Limits",
    "answered",
    "check_metadata_size",
    "check_name",
    "check_namespace_properties",
    "check_property_count",
    "check_table_properties",
    "chooses_a_class",
    "configures_access",
    "unsafe_key",
]

# the JdbcCatalog's columns: a namespace's joined levels, its property keys and values
NAMESPACE_CHARS, NAMESPACE_KEY_CHARS, NAMESPACE_VALUE_CHARS = 255, 255, 1000
_CLASS_KEY = re.compile(r"[.-]impl$", re.IGNORECASE)
# the property families of pyiceberg's and Iceberg's FileIOs and REST clients: none is a
# table's business (Spark's and pyiceberg's table properties are `format-version`, `write.*`,
# `read.*`, `commit.*`, `history.*`, `gc.*`, `owner`, `comment`, ...)
ACCESS_PREFIXES = (
    "s3.",
    "gcs.",
    "adls.",
    "oss.",
    "hdfs.",
    "hf.",
    "client.",
    "header.",
    "rest.",
    "py-",
)
ACCESS_KEYS = ("token", "credential", "uri", "warehouse", "prefix")


@dataclass(frozen=True)
class Limits:
    """The caps of the catalog front (LAKELOCK_CATALOG_MAX_*)."""

    max_metadata_bytes: int = 32 * 1024 * 1024
    max_properties: int = 200
    max_property_chars: int = 8192
    max_name_chars: int = 128
    max_manifest_entries: int = 100_000
    max_manifest_bytes: int = 128 * 1024 * 1024
    max_commit_entries: int = 200_000
    max_commit_manifests: int = 2000


class Budget:
    """What judging one commit may read of the client's files (the LAKELOCK_CATALOG_MAX_*
    of manifests): each file scanned before pyiceberg parses it (service.catalog.avro), and
    the files and entries of the whole commit added up. One per commit, used by one thread."""

    def __init__(self, limits: Limits) -> None:
        self.limits = limits
        self.seen: dict[str, bytes] = {}  # each file read, by its digest
        self.entries = 0

    def check(self, uri: str, data: bytes) -> None:
        """Count the file at `uri` (its bytes `data`) against the commit's bounds.

        Raises:
            InvalidRequest: the file or the commit passes a bound; the message names it.
        """
        from service.catalog.avro import scan

        caps = self.limits
        digest = hashlib.sha256(data).digest()
        if uri in self.seen:  # read again (pyiceberg opens a file once per read): counted once
            if self.seen[uri] != digest:
                raise InvalidRequest(
                    f"{uri[:300]} changed while the commit was judged; a committed file "
                    "never changes: write a new one"
                )
            return
        self.seen[uri] = digest
        if len(self.seen) > caps.max_commit_manifests:
            raise InvalidRequest(
                f"the commit names more than {caps.max_commit_manifests} manifest lists and "
                "manifests (LAKELOCK_CATALOG_MAX_COMMIT_MANIFESTS); commit fewer"
            )
        scanned = scan(
            data,
            what=uri[:300],
            max_entries=caps.max_manifest_entries,
            max_inflated=caps.max_manifest_bytes,
        )
        self.entries += scanned.entries
        if self.entries > caps.max_commit_entries:
            raise InvalidRequest(
                f"the commit's manifest lists and manifests hold more than "
                f"{caps.max_commit_entries} entries (LAKELOCK_CATALOG_MAX_COMMIT_ENTRIES); "
                "commit fewer files at once"
            )


def chooses_a_class(key: str) -> bool:
    return bool(_CLASS_KEY.search(key.strip()))


def configures_access(key: str) -> bool:
    """Whether a table property `key` configures a client's file access or catalog
    connection (any case, surrounding blanks ignored: clients differ in how they read keys)."""
    folded = key.strip().lower()
    return folded in ACCESS_KEYS or folded.startswith(ACCESS_PREFIXES)


def unsafe_key(key: str) -> bool:
    """A table property no client may set and no client is shown: it chooses a class or
    configures access."""
    return chooses_a_class(key) or configures_access(key)


def answered(properties: Mapping[str, str]) -> dict[str, str] | None:
    """`properties` as the front shows them to a client: without the unsafe keys
    (`unsafe_key`), which a table written by another catalog may hold; None when it holds
    none, so the stored text is answered as it is."""
    if not any(unsafe_key(key) for key in properties):
        return None
    return {key: value for key, value in properties.items() if not unsafe_key(key)}


def check_name(limits: Limits, name: str, *, what: str) -> None:
    """A namespace level or table name the catalog stores: printable and bounded.

    Raises:
        InvalidRequest: it is not.
    """
    if not name or not name.isprintable() or len(name) > limits.max_name_chars:
        raise InvalidRequest(
            f"{what} {name[:80]!r}: printable characters, 1 to {limits.max_name_chars} of them "
            "(LAKELOCK_CATALOG_MAX_NAME_CHARS)"
        )


def check_table_properties(limits: Limits, properties: Mapping[str, str]) -> None:
    """Properties a create or a commit sets: no class chosen, no file access or catalog
    connection configured, printable keys, each key and value within the cap.

    Raises:
        InvalidRequest: one breaks a rule; the message names it.
    """
    for key, value in properties.items():
        if chooses_a_class(key):
            raise InvalidRequest(
                f"table property {key[:200]!r} chooses a class, which this catalog never loads "
                "from a client; remove it (file access and file locations are the catalog's)"
            )
        if configures_access(key):
            raise InvalidRequest(
                f"table property {key[:200]!r} configures file access or a catalog "
                "connection, which every client loading the table would use; remove it and set "
                "it in your own client's catalog properties instead"
            )
        chars = limits.max_property_chars
        _check_property(key, value, chars, chars, "LAKELOCK_CATALOG_MAX_PROPERTY_CHARS")


def check_property_count(limits: Limits, count: int, *, what: str) -> None:
    """A table or namespace has at most the cap of properties.

    Raises:
        InvalidRequest: more than the cap.
    """
    if count > limits.max_properties:
        raise InvalidRequest(
            f"{what} would have {count} properties, more than {limits.max_properties} "
            "(LAKELOCK_CATALOG_MAX_PROPERTIES); remove some"
        )


def check_namespace_properties(limits: Limits, properties: Mapping[str, str]) -> None:
    """Properties set on a namespace: printable keys, within the cap and the JdbcCatalog's
    columns (keys of 255 characters, values of 1000).

    Raises:
        InvalidRequest: one breaks a rule; the message names it.
    """
    key_chars = min(limits.max_property_chars, NAMESPACE_KEY_CHARS)
    value_chars = min(limits.max_property_chars, NAMESPACE_VALUE_CHARS)
    cap = (
        "LAKELOCK_CATALOG_MAX_PROPERTY_CHARS, and the catalog's columns: keys of "
        f"{NAMESPACE_KEY_CHARS}, values of {NAMESPACE_VALUE_CHARS}"
    )
    for key, value in properties.items():
        _check_property(key, value, key_chars, value_chars, cap)


def _check_property(key: str, value: str, key_chars: int, value_chars: int, cap: str) -> None:
    if not key or not key.isprintable() or len(key) > key_chars:
        raise InvalidRequest(
            f"property key {key[:80]!r}: printable characters, 1 to {key_chars} of them ({cap})"
        )
    if len(value) > value_chars:
        raise InvalidRequest(
            f"property {key[:80]!r}: its value has {len(value)} characters, more than "
            f"{value_chars} ({cap})"
        )


def check_metadata_size(limits: Limits, size: int, before: int, table: str) -> None:
    """The metadata file the front would write stays within the cap, or shrinks (so a table
    past a lowered cap can still expire snapshots).

    Raises:
        InvalidRequest: it would grow past the cap.
    """
    if size > limits.max_metadata_bytes and size > before:
        raise InvalidRequest(
            f"{table}: the table's metadata would be {size} bytes, more than "
            f"{limits.max_metadata_bytes} (LAKELOCK_CATALOG_MAX_METADATA_BYTES); expire "
            "snapshots or remove unused schemas, specs and properties first"
        )
