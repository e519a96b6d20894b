"""Bring the lock database to the migration head, and tell whether it is there.

upgrade("mysql+pymysql://...")          # python -m service migrate
is_at_head(engine)                     # /readyz
"""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path

from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy import Engine
from sqlalchemy.engine import Connection

__all__ = ["alembic_config", "current", "downgrade", "head", "is_at_head", "upgrade"]

_HERE = Path(__file__).resolve().parent
# an installed wheel carries them as service/lock/migrations (pyproject.toml); a checkout (and
# the image's /app) has them at the top, beside the `service` package
_TOP = _HERE.parent.parent / "migrations"
MIGRATIONS = next(
    (p for p in (_HERE / "migrations", _TOP) if (p / "env.py").is_file()),
    _TOP,
)


def alembic_config(url: str) -> Config:
    config = Config()
    config.set_main_option("script_location", str(MIGRATIONS))
    config.attributes["database_url"] = url
    return config


def upgrade(url: str, revision: str = "head") -> None:
    """Apply every migration up to `revision` (fresh or older databases alike)."""
    command.upgrade(alembic_config(url), revision)


def downgrade(url: str, revision: str = "base") -> None:
    command.downgrade(alembic_config(url), revision)


@lru_cache
def head() -> str:
    return ScriptDirectory(str(MIGRATIONS)).get_current_head() or ""


def current(engine: Engine) -> str | None:
    with engine.connect() as conn:
        return revision_of(conn)


def revision_of(conn: Connection) -> str | None:
    """The migration the database behind `conn` is at (None before the first)."""
    return MigrationContext.configure(conn).get_current_revision()


def is_at_head(engine: Engine) -> bool:
    return current(engine) == head()
