"""Service configuration: one object, read from `LAKELOCK_*` environment variables.

    LAKELOCK_DATABASE_URL=mysql+pymysql://lakelock:pw@db:3306/lakelock
    LAKELOCK_TOKENS=ingest:job:s3cret,compactor:job:0ther,ops:operator:adm1n
    LAKELOCK_AUTH=off        # local runs only; the service warns on every start

`get_settings()` validates once and caches; a bad value stops start-up with a message naming the
variable and the rule. Every setting is listed in the README (`settings_table()`).
"""

from __future__ import annotations

import ipaddress
import re
from dataclasses import dataclass, replace
from functools import cached_property, lru_cache
from typing import Any, Literal

from pydantic import Field, ValidationError, field_validator, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from service.lock.rows import SYSTEM

__all__ = [
    "ApiToken",
    "Role",
    "Settings",
    "SettingsError",
    "get_settings",
    "load_settings",
    "settings_table",
]

Role = Literal["reader", "job", "operator"]
ROLES: tuple[Role, ...] = ("reader", "job", "operator")

DEFAULT_SQLITE_URL = "sqlite:///var/lakelock.db"
# the audit trail's actors that are no token: the service itself (an expiry) and every caller
# with auth off; a token of either name would pass its own calls off as theirs
ANONYMOUS = "anonymous"
RESERVED_NAMES = (SYSTEM, ANONYMOUS)


@dataclass(frozen=True)
class ApiToken:
    """One bearer token: `name:role:secret`. `repr` hides the secret so it is never logged."""

    name: str
    role: Role
    secret: str
    # the table name patterns of LAKELOCK_TOKEN_TABLES it may touch; None: every table
    tables: tuple[str, ...] | None = None

    def __repr__(self) -> str:
        return f"ApiToken(name={self.name!r}, role={self.role!r}, secret='***')"


class SettingsError(ValueError):
    """A `LAKELOCK_*` variable has a bad value; the message names it and the rule."""


class Settings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="LAKELOCK_", extra="ignore", frozen=True)

    database_url: str = Field(
        default=DEFAULT_SQLITE_URL,
        description="The lock database: `mysql+pymysql://user:password@host:3306/db` (or "
        "`mariadb+pymysql://`; `mysql://` means PyMySQL too; `mysql+mysqldb://` for the C "
        "driver mysqlclient, where it is installed) or `sqlite:///path` for local runs. A "
        "secret: the password is masked in logs.",
    )
    auth: Literal["on", "off"] = Field(
        default="on", description="`off` lets anyone do anything; local runs only."
    )
    tokens: str = Field(
        default="",
        repr=False,
        description="Bearer tokens, `name:role:secret,...`; role `reader`, `job` or "
        "`operator`; secrets of 8+ characters. Required when auth is on. A secret: logs name "
        "the token only.",
    )
    host: str = Field(default="127.0.0.1", description="Listen address (`0.0.0.0` in the image).")
    port: int = Field(default=8737, ge=1, le=65535, description="Listen port.")
    workers: int = Field(
        default=1,
        ge=1,
        le=64,
        description="Server processes. Each has its own database pool; on ECS prefer one per "
        "task and more tasks.",
    )
    trusted_proxies: str = Field(
        default="",
        description="The proxies whose `X-Forwarded-For` (and `X-Forwarded-Proto`) are "
        "believed, comma-separated addresses and networks: the load balancer's subnets "
        "(`10.0.0.0/24,10.0.1.0/24`). Empty: nobody's, and the request log records the "
        "address that connected, which no client can forge.",
    )
    token_tables: str = Field(
        default="",
        description="Which tables each listed token may touch, "
        "`name=pattern[,pattern...];name=...` with `*` and `?` globs matched against "
        "the lower-case `catalog.namespace.table` name (`ingest=lake.db.*;compactor=lake.*`). "
        "It covers the lease API's table routes (make known, lease, report on, read), the "
        "table list, the events (`/v1/events` shows only those tables'), a lease read by id, "
        "and the catalog front's tables and namespaces (a namespace is within the patterns when "
        "one could match a table in it: creating, loading or checking one outside is a 403 "
        "naming `namespace`, and the listing leaves it out); not `/metrics`, whose per-table "
        "series every reader sees. Tokens not listed touch any table; operators are never listed. "
        "Anything else is a 403 naming the token, the table and this setting.",
    )
    log_level: Literal["debug", "info", "warning", "error"] = Field(
        default="info", description="`info` logs one line per request and per lease transition."
    )
    log_format: Literal["json", "text"] = Field(
        default="json", description="`json`: one object per line on stderr; `text` for a terminal."
    )
    min_ttl_s: float = Field(default=1.0, gt=0, description="Shortest lease TTL a client may ask.")
    max_ttl_s: float = Field(
        default=3600.0, gt=0, description="Longest lease TTL a client may ask."
    )
    max_wait_s: float = Field(
        default=60.0,
        ge=0,
        le=600,
        description="Longest long-poll (`wait_s`, `wait`). Keep the load balancer's idle "
        "timeout above it.",
    )
    intent_ttl_s: float = Field(
        default=5.0,
        gt=0,
        le=3600,
        description="How long a maintenance intent lives unless its owner asks again. A "
        "waiting maintenance request keeps its intent open while its client is connected, so "
        "this bounds how long a compactor that died while draining holds ingest.",
    )
    poll_interval_s: float = Field(
        default=0.05,
        gt=0,
        le=5,
        description="How often a long-poll re-reads its table's version, to see changes made "
        "through other replicas.",
    )
    sweep_interval_s: float = Field(
        default=1.0,
        gt=0,
        le=3600,
        description="How often each replica ends expired leases and intents.",
    )
    retry_after_s: float = Field(
        default=1.0,
        gt=0,
        le=600,
        description="`Retry-After` on 503 answers and on refusals without an estimate of "
        "their own.",
    )
    max_partitions: int = Field(
        default=1000,
        ge=1,
        le=100000,
        description="Most partitions one lease may name (more is a 422; the jobs then lease "
        "the whole table). Each name costs about its length in the body (`max_body_bytes`).",
    )
    max_body_bytes: int = Field(
        default=65536, ge=1024, description="Largest request body; larger ones get 413."
    )
    db_pool_size: int = Field(
        default=40,
        ge=1,
        le=1000,
        description="Database connections kept per process (as many again may open under load).",
    )
    db_timeout_s: float = Field(
        default=5.0,
        gt=0,
        le=120,
        description="Database connect, read and write timeout, and the wait for a free pooled "
        "connection. A call answers 503 within about 2x this when the database is unreachable, "
        "silent or stuck (connect, then one read; no ping first).",
    )
    runs_kept: int = Field(default=50, ge=1, le=10000, description="Run reports kept per table.")
    retention_days: int = Field(
        default=30,
        ge=1,
        le=3650,
        description="Audit events older than this are deleted (each table keeps its newest "
        "event), and so are commit leases, maintenance leases and claims that ended longer ago, "
        "and due partitions (the files counted of a partition since its last compaction) that "
        "nothing touched for as long; due samples (due to compacted) and followers that "
        "stopped polling go after a day, idempotency keys (the catalog front's answers kept for "
        "them) when their lifetime ends.",
    )
    prune_interval_s: float = Field(
        default=600.0,
        gt=0,
        le=86400,
        description="How often each replica deletes what is past the retention; the first pass "
        "comes at a random point within the first interval, so replicas spread out.",
    )
    prune_batch_rows: int = Field(
        default=1000,
        ge=1,
        le=10000,
        description="Rows deleted per transaction while pruning; each batch is followed by a "
        "pause as long as it took, so writers are never held up for long.",
    )
    metrics_max_tables: int = Field(
        default=100,
        ge=0,
        le=100000,
        description="How many tables get the per-table debt gauges (`lakelock_table_small_files`, "
        "`_delete_files`, `_partitions_over_target`, `_partitions_over_bound`, "
        "`_worst_partition`): those with partitions past the hard bound first, then those with "
        "the most small plus delete files; and how many get the due gauges "
        "(`lakelock_due_to_compacted_seconds`, `lakelock_due_partitions`, "
        "`lakelock_due_oldest_seconds`, `lakelock_due_followers`): those furthest behind. "
        "Bounds the series a scrape carries; 0 turns them off.",
    )
    due_data_files: int = Field(
        default=4,
        ge=1,
        le=100000,
        description="A partition is due for compaction once this many data files were added "
        "to it since its last compaction (net of those a commit deleted), as commits land "
        "(counted from commit-lease releases "
        "and catalog-front commits, corrected by the compactors' debt reports); a compactor "
        "that follows the stream long-polls `GET /v1/due` for due partitions.",
    )
    due_delete_files: int = Field(
        default=4,
        ge=1,
        le=100000,
        description="Likewise for delete files: a partition is due once this many were added "
        "since its last compaction (or its data files reached `LAKELOCK_DUE_DATA_FILES`).",
    )
    due_equality_delete_files: int = Field(
        default=1,
        ge=1,
        le=100000,
        description="Likewise for equality delete files (a Flink upsert's), counted among the "
        "delete files too: every reader joins each with every older data file of its "
        "partition, so one makes a partition due by default.",
    )
    shutdown_grace_s: float = Field(
        default=20.0,
        ge=0,
        le=600,
        description="On SIGTERM, how long in-flight requests may take before they are cut off "
        "(pending long-polls answer at once). Keep the ECS `stopTimeout` above it.",
    )
    keep_alive_s: float = Field(
        default=90.0,
        ge=1,
        le=3600,
        description="How long an idle keep-alive connection stays open. Keep it above the load "
        "balancer's idle timeout (75 s in docs/deployment.md): a connection the service closes "
        "first can meet the balancer's next request, which then fails (a 502, or a client's "
        "`Server disconnected`).",
    )
    catalog_warehouse: str = Field(
        default="",
        description="Where the catalog front keeps new tables (`s3://bucket/warehouse`, "
        "`file:///data/warehouse`). Set, the service serves the Iceberg REST catalog at "
        "`/iceberg` over the JdbcCatalog tables of its database and fences maintenance commits "
        "(docs/catalogs.md); empty, no catalog is served.",
    )
    catalog_name: str = Field(
        default="lakelock",
        pattern=r"^[A-Za-z_][A-Za-z0-9_]*$",
        max_length=64,
        description="The catalog front's name: the JdbcCatalog's `catalog_name` of its rows, "
        "and the first part of its tables' names in leases and events "
        "(`<name>.<namespace>.<table>`). Name the jobs' Spark catalog the same.",
    )
    catalog_s3_endpoint: str = Field(
        default="",
        description="The S3 endpoint the catalog front reaches an `s3://` warehouse at "
        "(`https://s3.eu-west-1.amazonaws.com`, `http://127.0.0.1:9000` for an S3-compatible "
        "store); empty: AWS's own for the region. Its keys come from the standard AWS chain "
        "(environment, profile, web identity, the ECS task role), never from a setting. Handed "
        "to clients in `/iceberg/v1/config` as `s3.endpoint`.",
    )
    catalog_s3_region: str = Field(
        default="",
        description="The region of the warehouse's bucket (`eu-west-1`); empty: the AWS chain's "
        "(`AWS_REGION`, the profile). Handed to clients as `client.region` and `s3.region`: "
        "without one, pyiceberg asks AWS where the bucket is and Iceberg's S3FileIO fails.",
    )
    catalog_s3_path_style: bool = Field(
        default=False,
        description="Address the bucket in the path (`http://host/bucket/key`), as most "
        "S3-compatible stores need, instead of the host name (AWS's own). Handed to clients "
        "as `s3.path-style-access`.",
    )

    catalog_idempotency_lifetime_s: float = Field(
        default=1800.0,
        ge=0,
        le=7 * 86400,
        description="How long the catalog front keeps its answer to a mutation sent with an "
        "`Idempotency-Key` (Iceberg's REST specification from 1.11), so that a resend with the "
        "same key is answered as the first request was, never applied twice; advertised in "
        "`/v1/config` as `idempotency-key-lifetime` (1800: `PT1800S`), which makes Iceberg's "
        "1.11 Java client send keys. 0: not advertised, and keys are ignored.",
    )
    catalog_max_parked: int = Field(
        default=256,
        ge=0,
        le=100_000,
        description="How many held commits the catalog front parks at once, in all, per service "
        "process (LAKELOCK_CATALOG_HOLD_WAIT_S); a commit held past it is answered 429 at once "
        "(reason `too-many-parked`, with the hold's Retry-After). A parked commit holds no "
        "thread and is judged again from the lock's state only, not by reading its files, "
        "until its hold ends or its table's pointer moves.",
    )
    catalog_max_parked_per_token: int = Field(
        default=32,
        ge=0,
        le=100_000,
        description="How many held commits of one token the catalog front parks at once, per "
        "service process; past it, as past LAKELOCK_CATALOG_MAX_PARKED.",
    )
    catalog_hold_wait_s: float = Field(
        default=30.0,
        ge=0,
        le=120,
        description="How long the catalog front parks a foreign commit that a maintenance lease, "
        "a drain, backpressure or a turn of the head holds, waiting for the hold to end, "
        "before it answers 429 with a Retry-After of the hold's expected remaining time; well "
        "under an Iceberg client's socket timeout (3 minutes). When the hold ends the commit "
        "is applied, or answered 409 if its base moved (the client retries on fresh "
        "metadata). A parked commit is one audit event: its `catalog.commit` with `held_s`, "
        "or one `catalog.refused`. 0: answer 429 at once.",
    )
    catalog_head_turn_s: float = Field(
        default=10.0,
        ge=0,
        le=120,
        description="How long a maintenance commit that lost the table's head gets the next "
        "turn of it: when the catalog front answers 409 to a commit of a maintenance lease's "
        "holder because another commit moved the head since its base, every foreign data "
        "commit to the table (appends too, into any partition) is held, parked as above, until "
        "the lease's next commit lands, the lease ends, or this passes; then they are applied, "
        "or answered 409 if their base moved. Longer than the client's retries of the rewrite "
        "(Iceberg's take about 1.5 s). 0: no turn.",
    )
    catalog_max_metadata_bytes: int = Field(
        default=32 * 1024 * 1024,
        ge=64 * 1024,
        description="Largest metadata file the catalog front writes for a table (its JSON); a "
        "commit or create that would write a larger one is a 400, unless it shrinks the file "
        "(expiring snapshots always can).",
    )
    catalog_max_properties: int = Field(
        default=200,
        ge=10,
        le=100000,
        description="Most properties a table or namespace of the catalog front may have; more "
        "is a 400.",
    )
    catalog_max_property_chars: int = Field(
        default=8192,
        ge=255,
        le=1048576,
        description="Longest table property key or value the catalog front accepts (a "
        "namespace's are also bounded by the JDBC catalog's columns: keys of 255, values of "
        "1000); longer is a 400.",
    )
    catalog_max_name_chars: int = Field(
        default=128,
        ge=64,
        le=255,
        description="Longest namespace level or table name the catalog front creates (names "
        "must be printable; a namespace's levels together fit 255, the JDBC catalog's column).",
    )
    catalog_max_manifest_entries: int = Field(
        default=100_000,
        ge=1000,
        le=10_000_000,
        description="Most entries a manifest list or manifest a commit names may hold; the "
        "front counts them before it parses the file (each entry parsed costs it about 1 KB "
        "and 17 µs while the commit is judged). More is a 400.",
    )
    catalog_max_manifest_bytes: int = Field(
        default=128 * 1024 * 1024,
        ge=1024 * 1024,
        le=2 * 1024 * 1024 * 1024,
        description="Most bytes a manifest list or manifest a commit names may inflate to "
        "(its Avro blocks uncompressed); more is a 400.",
    )
    catalog_max_commit_entries: int = Field(
        default=200_000,
        ge=1000,
        le=100_000_000,
        description="Most entries of all the manifest lists and manifests one commit makes the "
        "front read (its new ones, and those its snapshots drop): what judging one commit may "
        "cost the service, about 1 KB and 17 µs each (benchmarks/manifest_bomb.py). A rewrite "
        "of more files in one commit needs it raised, with the task's memory. More is a 400.",
    )
    catalog_max_commit_manifests: int = Field(
        default=2000,
        ge=10,
        le=1_000_000,
        description="Most manifest lists and manifests one commit makes the front read; more "
        "is a 400.",
    )

    @field_validator("catalog_warehouse")
    @classmethod
    def _check_warehouse(cls, value: str) -> str:
        value = value.strip().rstrip("/")
        if value and "://" not in value:
            raise ValueError(
                "must be a URI with a scheme: file:///abs/path, s3://bucket/prefix, ..."
            )
        return value

    @field_validator("catalog_s3_endpoint")
    @classmethod
    def _check_endpoint(cls, value: str) -> str:
        value = value.strip().rstrip("/")
        if value and not _ENDPOINT.match(value):
            raise ValueError(
                "must be an http:// or https:// URL of a host and an optional port, with no "
                "path, user or query: https://s3.eu-west-1.amazonaws.com, http://127.0.0.1:9000"
            )
        return value

    @field_validator("catalog_s3_region")
    @classmethod
    def _check_region(cls, value: str) -> str:
        value = value.strip()
        if value and not re.fullmatch(r"[a-z0-9][a-z0-9-]{0,31}", value):
            raise ValueError("must be a region name: eu-west-1, us-east-1, ...")
        return value

    @field_validator("database_url")
    @classmethod
    def _normalise_url(cls, value: str) -> str:
        value = value.strip()
        # `mysql://` would pick the MySQLdb driver, which is not installed; PyMySQL is
        if value.startswith("mysql://"):
            value = "mysql+pymysql://" + value.removeprefix("mysql://")
        if value.startswith("mariadb://"):
            value = "mariadb+pymysql://" + value.removeprefix("mariadb://")
        drivers = (
            "mysql+pymysql://",
            "mariadb+pymysql://",
            "mysql+mysqldb://",
            "mariadb+mysqldb://",
        )
        if not value.startswith(("sqlite://", *drivers)):
            raise ValueError(f"must start with sqlite:/// or one of {', '.join(drivers)}")
        return value

    @field_validator("tokens")
    @classmethod
    def _check_tokens(cls, value: str) -> str:
        parse_tokens(value)
        return value

    @field_validator("trusted_proxies")
    @classmethod
    def _check_proxies(cls, value: str) -> str:
        parse_proxies(value)
        return value

    @field_validator("token_tables")
    @classmethod
    def _check_token_tables(cls, value: str) -> str:
        parse_token_tables(value)
        return value

    @model_validator(mode="after")
    def _check_storage(self) -> Settings:
        scheme = self.catalog_warehouse.partition("://")[0].lower()
        if not self.catalog_warehouse:
            return self
        if scheme not in ("file", "s3", "s3a", "s3n"):
            raise ValueError(
                f"LAKELOCK_CATALOG_WAREHOUSE is on {scheme}://, which the catalog front cannot "
                "reach: use s3://bucket/prefix (s3a://, s3n://: the same storage) or "
                "file:///abs/path"
            )
        s3 = [
            name
            for name, value in (
                ("LAKELOCK_CATALOG_S3_ENDPOINT", self.catalog_s3_endpoint),
                ("LAKELOCK_CATALOG_S3_REGION", self.catalog_s3_region),
                ("LAKELOCK_CATALOG_S3_PATH_STYLE", self.catalog_s3_path_style),
            )
            if value
        ]
        if scheme == "file" and s3:
            raise ValueError(
                f"{', '.join(s3)} set, but LAKELOCK_CATALOG_WAREHOUSE is on local files: point "
                "the warehouse at s3://bucket/prefix, or unset them"
            )
        return self

    @model_validator(mode="after")
    def _check_bounds(self) -> Settings:
        if self.min_ttl_s > self.max_ttl_s:
            raise ValueError("LAKELOCK_MIN_TTL_S must not exceed LAKELOCK_MAX_TTL_S")
        if self.auth == "on" and not self.api_tokens:
            raise ValueError(
                "LAKELOCK_TOKENS is empty: set name:role:secret[,...] with role reader, job or "
                "operator, or switch auth off explicitly with LAKELOCK_AUTH=off (local use only)"
            )
        roles = {token.name: token.role for token in parse_tokens(self.tokens)}
        for name in parse_token_tables(self.token_tables):
            if name not in roles:
                raise ValueError(
                    f"LAKELOCK_TOKEN_TABLES names the token {name!r}, which LAKELOCK_TOKENS "
                    "does not have: use the name part of a configured token"
                )
            if roles[name] == "operator":
                raise ValueError(
                    f"LAKELOCK_TOKEN_TABLES names {name!r}, an operator token: operators touch "
                    "every table; leave it out"
                )
        return self

    @cached_property
    def api_tokens(self) -> tuple[ApiToken, ...]:
        """The tokens with their table patterns, parsed once: every request's authentication
        reads them."""
        tables = parse_token_tables(self.token_tables)
        return tuple(
            replace(token, tables=tables[token.name]) if token.name in tables else token
            for token in parse_tokens(self.tokens)
        )

    @property
    def proxies(self) -> list[str]:
        """LAKELOCK_TRUSTED_PROXIES as a list (empty: trust no proxy)."""
        return parse_proxies(self.trusted_proxies)

    @property
    def is_sqlite(self) -> bool:
        return self.database_url.startswith("sqlite")


def parse_tokens(value: str) -> tuple[ApiToken, ...]:
    """`name:role:secret,...` → tokens; ValueError names a bad entry (never its secret)."""
    found: list[ApiToken] = []
    names: set[str] = set()
    for position, entry in enumerate(filter(None, (e.strip() for e in value.split(","))), 1):
        parts = entry.split(":", 2)
        if len(parts) != 3 or not all(parts):
            raise ValueError(f"entry {position} is not name:role:secret")
        name, role, secret = parts
        if role not in ROLES:
            raise ValueError(f"entry {position} ({name}) has role {role!r}; use one of {ROLES}")
        if len(secret) < 8:
            raise ValueError(f"entry {position} ({name}) has a secret shorter than 8 characters")
        if name in names:
            raise ValueError(f"entry {position} repeats the name {name!r}")
        if name in RESERVED_NAMES:
            raise ValueError(
                f"entry {position} is named {name!r}, which the audit trail uses for "
                f"{'the service itself' if name == SYSTEM else 'callers with auth off'}; "
                "give the token another name"
            )
        names.add(name)
        found.append(ApiToken(name=name, role=role, secret=secret))
    return tuple(found)


def parse_proxies(value: str) -> list[str]:
    """`10.0.0.0/24,10.0.1.7` → the entries; ValueError names one that is no address or
    network."""
    found = []
    for entry in filter(None, (e.strip() for e in value.split(","))):
        try:
            ipaddress.ip_network(entry)  # an address is a network of one
        except ValueError:
            raise ValueError(
                f"{entry!r} is not an IP address or network: list the load balancer's "
                "addresses or subnets, e.g. 10.0.0.0/24,10.0.1.0/24 (a network's host bits "
                "zero; no `*`, no host names)"
            ) from None
        found.append(entry)
    return found


# an endpoint: a scheme, a host name or address (IPv6 in brackets), an optional port
_ENDPOINT = re.compile(r"^https?://([A-Za-z0-9.-]+|\[[0-9A-Fa-f:.]+\])(:\d{1,5})?$")
_GLOB = re.compile(r"^[A-Za-z0-9_.*?]+$")


def parse_token_tables(value: str) -> dict[str, tuple[str, ...]]:
    """`ingest=lake.db.*;compactor=lake.*,ops.*` → {token name: lower-case patterns};
    ValueError names a bad entry."""
    found: dict[str, tuple[str, ...]] = {}
    for position, entry in enumerate(filter(None, (e.strip() for e in value.split(";"))), 1):
        name, sep, patterns = (part.strip() for part in entry.partition("="))
        globs = tuple(p.strip().lower() for p in patterns.split(",") if p.strip())
        if not sep or not name or not globs:
            raise ValueError(f"entry {position} is not name=pattern[,pattern...]")
        bad = next((glob for glob in globs if not _GLOB.match(glob)), None)
        if bad is not None:
            raise ValueError(
                f"entry {position} ({name}) has the pattern {bad!r}: use letters, digits, _ "
                "and . with the globs * and ?, e.g. lake.db.*"
            )
        if name in found:
            raise ValueError(f"entry {position} repeats the token {name!r}")
        found[name] = globs
    return found


def load_settings(**overrides: Any) -> Settings:
    """Settings from the environment and `overrides`; SettingsError names each bad variable."""
    try:
        return Settings(**overrides)
    except ValidationError as exc:
        lines = []
        for error in exc.errors():
            field = ".".join(str(p) for p in error["loc"]) or "settings"
            name = f"LAKELOCK_{field.upper()}" if error["loc"] else "settings"
            message = error["msg"].removeprefix("Value error, ")
            lines.append(f"{name}: {message}")
        raise SettingsError("invalid configuration:\n  " + "\n  ".join(lines)) from None


@lru_cache
def get_settings() -> Settings:
    return load_settings()


def settings_table() -> str:
    """The Markdown table of every setting (in the README), from `Settings.model_fields`."""
    rows = ["| variable | default | meaning |", "| --- | --- | --- |"]
    for name, field in Settings.model_fields.items():
        default = "(empty)" if field.default == "" else f"`{field.default}`"
        rows.append(f"| `LAKELOCK_{name.upper()}` | {default} | {field.description} |")
    return "\n".join(rows) + "\n"
