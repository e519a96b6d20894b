"""Service configuration: one object, read from `LAKELOCK_*` environment variables.

    LAKELOCK_DATABASE_URL=mysql+pymysql://lakelock:pw@db:3306/lakelock
    LAKELOCK_TOKENS=ingest:job:s3cret,compactor:job:0ther,ops:operator:adm1n
    LAKELOCK_AUTH=off        # local runs only; the service warns on every start

`get_settings()` validates once and caches; a bad value stops start-up with a message naming the
variable and the rule. Every setting is listed in the README (`settings_table()`).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from typing import Literal

from pydantic import Field, ValidationError, field_validator, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

__all__ = [
    "Role",
    "ApiToken",
    "Settings",
    "SettingsError",
    "get_settings",
    "load_settings",
    "settings_table",
]

Role = Literal["reader", "job", "operator"]
ROLES: tuple[Role, ...] = ("reader", "job", "operator")

DEFAULT_SQLITE_URL = "sqlite:///var/lakelock.db"


@dataclass(frozen=True)
class ApiToken:
    """One bearer token: `name:role:secret`. `repr` hides the secret so it is never logged."""

    name: str
    role: Role
    secret: str

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
        description="Audit events and ended commit leases older than this are deleted (each "
        "table keeps its newest event).",
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
        "the most small plus delete files. Bounds the series a scrape carries; 0 turns them off.",
    )
    shutdown_grace_s: float = Field(
        default=20.0,
        ge=0,
        le=600,
        description="On SIGTERM, how long in-flight requests may take before they are cut off "
        "(pending long-polls answer at once). Keep the ECS `stopTimeout` above it.",
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

    @field_validator("catalog_warehouse")
    @classmethod
    def _check_warehouse(cls, value: str) -> str:
        value = value.strip().rstrip("/")
        if value and "://" not in value:
            raise ValueError(
                "must be a URI with a scheme: file:///abs/path, s3://bucket/prefix, ..."
            )
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

    @model_validator(mode="after")
    def _check_bounds(self) -> Settings:
        if self.min_ttl_s > self.max_ttl_s:
            raise ValueError("LAKELOCK_MIN_TTL_S must not exceed LAKELOCK_MAX_TTL_S")
        if self.auth == "on" and not self.api_tokens:
            raise ValueError(
                "LAKELOCK_TOKENS is empty: set name:role:secret[,...] with role reader, job or "
                "operator, or switch auth off explicitly with LAKELOCK_AUTH=off (local use only)"
            )
        return self

    @property
    def api_tokens(self) -> tuple[ApiToken, ...]:
        return parse_tokens(self.tokens)

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
        names.add(name)
        found.append(ApiToken(name=name, role=role, secret=secret))  # type: ignore[arg-type]
    return tuple(found)


def load_settings(**overrides: object) -> Settings:
    """Settings from the environment and `overrides`; SettingsError names each bad variable."""
    try:
        return Settings(**overrides)  # type: ignore[arg-type]
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
