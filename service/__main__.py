"""`python -m service` (console script `lakelock-service`): serve, or migrate the database.

    python -m service                         # serve on LAKELOCK_HOST:LAKELOCK_PORT
    python -m service --host 0.0.0.0 --port 8737 --workers 2
    python -m service migrate                 # bring LAKELOCK_DATABASE_URL to the head

SIGTERM (ECS stopping a task): stop accepting, answer pending long-polls at once with what they
have, finish in-flight requests, exit within LAKELOCK_SHUTDOWN_GRACE_S.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
from pathlib import Path

from service.extras import needs_extras

__all__ = ["main"]

log = logging.getLogger("lakelock.service")


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="lakelock-service", description=__doc__.split("\n")[0])
    parser.add_argument("command", nargs="?", choices=["serve", "migrate"], default="serve")
    parser.add_argument("--host", help="listen address (LAKELOCK_HOST)")
    parser.add_argument("--port", type=int, help="listen port (LAKELOCK_PORT)")
    parser.add_argument("--workers", type=int, help="worker processes (LAKELOCK_WORKERS)")
    parser.add_argument(
        "--migrate", action="store_true", help="migrate the database to the head before serving"
    )
    return parser


def _ensure_sqlite_folder(url: str) -> None:
    if url.startswith("sqlite:///") and not url.startswith("sqlite:///:memory:"):
        Path(url.removeprefix("sqlite:///")).parent.mkdir(parents=True, exist_ok=True)


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    with needs_extras("lakelock-service"):
        return _main(args)


def _main(args: argparse.Namespace) -> int:
    for name, value in (("HOST", args.host), ("PORT", args.port), ("WORKERS", args.workers)):
        if value is not None:
            os.environ[f"LAKELOCK_{name}"] = str(value)

    from service.server.logs import configure, mask_url
    from service.server.settings import SettingsError, get_settings, load_settings

    try:
        # a migration needs the database only: it does not ask for tokens
        settings = load_settings(auth="off") if args.command == "migrate" else get_settings()
    except SettingsError as exc:
        print(f"lakelock: {exc}", file=sys.stderr)
        return 2
    configure(level=settings.log_level, fmt=settings.log_format)
    _ensure_sqlite_folder(settings.database_url)

    from service.lock import migrate

    if args.command == "migrate" or args.migrate or settings.is_sqlite:
        # SQLite is the local default: a fresh file is migrated on start, so one command runs
        database = mask_url(settings.database_url)
        try:
            migrate.upgrade(settings.database_url)
        except Exception:
            # one JSON line with the traceback (not a bare one on stderr), then a failed exit
            # so a one-off migration task is seen to fail and the deploy stops
            log.exception("migration failed", extra={"database": database})
            return 1
        log.info("database at migration head", extra={"database": database})
        if args.command == "migrate":
            return 0
    from service.server.serve import serve

    return serve(settings)


if __name__ == "__main__":
    sys.exit(main())
