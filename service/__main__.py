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
import signal
import sys
from pathlib import Path
from types import FrameType
from typing import TYPE_CHECKING

import uvicorn
from uvicorn.supervisors import Multiprocess

if TYPE_CHECKING:
    from service.settings import Settings

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
    for name, value in (("HOST", args.host), ("PORT", args.port), ("WORKERS", args.workers)):
        if value is not None:
            os.environ[f"LAKELOCK_{name}"] = str(value)

    from service.logs import configure, mask_url
    from service.settings import SettingsError, get_settings, load_settings

    try:
        # a migration needs the database only: it does not ask for tokens
        settings = load_settings(auth="off") if args.command == "migrate" else get_settings()
    except SettingsError as exc:
        print(f"lakelock: {exc}", file=sys.stderr)
        return 2
    configure(level=settings.log_level, fmt=settings.log_format)
    _ensure_sqlite_folder(settings.database_url)

    from service import migrate

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
    return _serve(settings)


def _serve(settings: Settings) -> int:
    from service.logs import logging_config

    config = uvicorn.Config(
        "service.app:create_app",
        factory=True,
        host=settings.host,
        port=settings.port,
        workers=settings.workers,
        proxy_headers=True,  # behind the load balancer: client address from X-Forwarded-For
        forwarded_allow_ips="*",
        # each worker process configures its logging from this, not from main()
        log_config=logging_config(settings.log_level, settings.log_format),
        access_log=False,  # service.app logs one JSON line per request instead
        timeout_graceful_shutdown=settings.shutdown_grace_s,
    )
    if settings.workers > 1:
        from service.metrics import multiprocess_folder

        # set before the workers start: each one's counters go to files there, and a scrape
        # answered by any worker sums them all
        with multiprocess_folder():
            # the supervisor sends SIGTERM on to every worker, whose app wakes its own
            # long-polls (service.app), and returns once they have all exited
            Multiprocess(config, sockets=[config.bind_socket()]).run()
        return 0
    server = CleanExitServer(config)
    server.run()
    return 0 if server.started else 3


class CleanExitServer(uvicorn.Server):
    """A uvicorn server whose process exits 0 after a graceful stop on SIGTERM or SIGINT.

    uvicorn re-raises the signal it caught once it has shut down, so the process would die of
    SIGTERM (status 143) although it stopped cleanly, and ECS would show every stop as a crash.
    Pending long-polls are woken by the app itself (service.app), not here.
    """

    def handle_exit(self, sig: int, frame: FrameType | None) -> None:
        # uvicorn's handle_exit, minus recording the signal for the re-raise
        if self.should_exit and sig == signal.SIGINT:
            self.force_exit = True
        else:
            self.should_exit = True


if __name__ == "__main__":
    sys.exit(main())
