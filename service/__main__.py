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
from types import FrameType
from typing import TYPE_CHECKING, Any

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
    from service.settings import SettingsError, get_settings

    try:
        settings = get_settings()
    except SettingsError as exc:
        print(f"lakelock: {exc}", file=sys.stderr)
        return 2
    configure(level=settings.log_level, fmt=settings.log_format)
    _ensure_sqlite_folder(settings.database_url)

    from service import migrate

    if args.command == "migrate" or args.migrate or settings.is_sqlite:
        # SQLite is the local default: a fresh file is migrated on start, so one command runs
        migrate.upgrade(settings.database_url)
        log.info("database at migration head", extra={"database": mask_url(settings.database_url)})
        if args.command == "migrate":
            return 0
    return _serve(settings)


def _serve(settings: Settings) -> int:
    import uvicorn

    options = {
        "host": settings.host,
        "port": settings.port,
        "proxy_headers": True,  # behind the load balancer: client address from X-Forwarded-For
        "forwarded_allow_ips": "*",
        "log_config": None,
        "access_log": False,  # service.app logs one JSON line per request instead
        "timeout_graceful_shutdown": settings.shutdown_grace_s,
    }
    if settings.workers > 1:
        # uvicorn's supervisor forwards SIGTERM to the workers; their long-polls answer at their
        # deadline (at most LAKELOCK_MAX_WAIT_S). On ECS prefer one worker per task.
        uvicorn.run("service.app:create_app", factory=True, workers=settings.workers, **options)
        return 0

    class GracefulServer(uvicorn.Server):
        """On SIGTERM/SIGINT, first wake every pending long-poll so it answers now with the
        current state, then let uvicorn stop accepting and finish in-flight requests."""

        def handle_exit(self, sig: int, frame: FrameType | None) -> None:
            app = _find_fastapi(getattr(self.config, "loaded_app", None))
            if app is not None and hasattr(app.state, "runtime"):
                app.state.runtime.notifier.close()
            super().handle_exit(sig, frame)

    GracefulServer(uvicorn.Config("service.app:create_app", factory=True, **options)).run()
    return 0


def _find_fastapi(app: Any) -> Any:
    """The FastAPI app under uvicorn's middleware wrappers."""
    seen = 0
    while app is not None and seen < 10:
        if hasattr(app, "state") and hasattr(app, "router"):
            return app
        app = getattr(app, "app", None)
        seen += 1
    return None


if __name__ == "__main__":
    sys.exit(main())
