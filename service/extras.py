"""Which extra of the `lakelock` distribution provides a module, said in one line.

Each host installs the base (the client) and the extra it needs (pyproject.toml):

    service   the lease service          lakelock-service, python -m service
    spark     the Spark jobs             lakelock-ingest, lakelock-compactor
    ops       the operators' command     lakelock (and lakelock audit)
    demo      bin/run's pipeline         python -m demo

Every entry point runs its work inside `needs_extras`, so a missing module becomes

    lakelock-ingest: needs the spark extra (no module named 'pyspark'):
    pip install 'lakelock[spark]'

(on one line) and exit status 2, instead of a traceback. A module no extra provides is a
fault: re-raised.
"""

from __future__ import annotations

import importlib.util
import sys
from collections.abc import Iterator, Sequence
from contextlib import contextmanager

__all__ = ["EXTRA_OF", "missing_extra", "needs_extras", "require"]

EXTRA_OF = {
    "fastapi": "service",
    "starlette": "service",
    "uvicorn": "service",
    "sqlalchemy": "service",
    "alembic": "service",
    "pymysql": "service",
    "pydantic_settings": "service",
    "prometheus_client": "service",
    "pyspark": "spark",
    "py4j": "spark",
    "snowpark_connect_deps_iceberg": "spark",
    "typer": "ops",
    "rich": "ops",
    "pyiceberg": "ops",
}
"""Top-level module -> the extra that installs it."""


def missing_extra(
    exc: ModuleNotFoundError, command: str, *, extra: str | None = None
) -> str | None:
    """The line that tells how to install what `command` missed, or None when no extra has it.

    `extra` names the extra to install when the command's own is not the module's first home
    (the demo needs pyiceberg, which is in `ops`, through its own `demo` extra).
    """
    top = (exc.name or "").split(".")[0]
    if top not in EXTRA_OF:
        return None
    wanted = extra or EXTRA_OF[top]
    return (
        f"{command}: needs the {wanted} extra (no module named {top!r}): "
        f"pip install 'lakelock[{wanted}]'"
    )


def require(*modules: str) -> None:
    """Raise ModuleNotFoundError for the first of `modules` that is not installed, without
    importing any (inside `needs_extras`: the one line that names the extra)."""
    for name in modules:
        if importlib.util.find_spec(name) is None:
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)


@contextmanager
def needs_extras(
    command: str, *, extra: str | None = None, requires: Sequence[str] = ()
) -> Iterator[None]:
    """Run the block; a module that an extra provides and is missing ends the process with one
    line on stderr and exit status 2 (see the module docstring). `requires` names modules the
    command needs before its block imports them (the demo imports Spark only once it runs)."""
    try:
        require(*requires)
        yield
    except ModuleNotFoundError as exc:
        line = missing_extra(exc, command, extra=extra)
        if line is None:
            raise
        print(line, file=sys.stderr)
        raise SystemExit(2) from None
