"""Structured logs: one JSON object per line on stderr.

    configure(level="info", fmt="json")        # this process
    uvicorn.Config(..., log_config=logging_config("info", "json"))   # and every worker it spawns

Fields passed with `extra=` become keys. Secrets never reach a log line: tokens are logged by
name, database URLs with the password masked (`mask_url`).
"""

from __future__ import annotations

import json
import logging
import logging.config
from datetime import UTC, datetime
from typing import Any

__all__ = ["JsonFormatter", "configure", "logging_config", "mask_url"]

_STANDARD = set(vars(logging.makeLogRecord({}))) | {"message", "asctime", "color_message"}
TEXT_FORMAT = "%(asctime)s %(levelname)s %(name)s %(message)s"


class JsonFormatter(logging.Formatter):
    """`{"ts", "level", "logger", "msg", <extra fields>..., "exc"?}` on one line."""

    def format(self, record: logging.LogRecord) -> str:
        line: dict[str, Any] = {
            "ts": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname.lower(),
            "logger": record.name,
            "msg": record.getMessage(),
        }
        for key, value in vars(record).items():
            if key not in _STANDARD and not key.startswith("_"):
                line[key] = value
        if record.exc_info:
            line["exc"] = self.formatException(record.exc_info)
        if record.stack_info:
            line["stack"] = self.formatStack(record.stack_info)
        return json.dumps(line, default=str)


def logging_config(level: str = "info", fmt: str = "json") -> dict[str, Any]:
    """A `logging.config.dictConfig` for the service: everything to stderr through one handler.

    Given to uvicorn as `log_config`, so a worker process it spawns (LAKELOCK_WORKERS > 1)
    logs the same way as the process that started it.
    """
    formatter: dict[str, Any] = {"()": JsonFormatter} if fmt == "json" else {"format": TEXT_FORMAT}
    root_level = level.upper()
    return {
        "version": 1,
        # loggers made at import time (lakelock.*, sqlalchemy) must keep working
        "disable_existing_loggers": False,
        "formatters": {"default": formatter},
        "handlers": {
            "stderr": {
                "class": "logging.StreamHandler",
                "formatter": "default",
                "stream": "ext://sys.stderr",
            }
        },
        "root": {"level": root_level, "handlers": ["stderr"]},
        "loggers": {
            # uvicorn's own lines go through the root handler, as JSON
            "uvicorn": {"handlers": [], "propagate": True},
            "uvicorn.error": {"handlers": [], "propagate": True},
            # the request log of service.server.middleware replaces uvicorn's access log
            "uvicorn.access": {"handlers": [], "propagate": False},
            # alembic narrates every migration context; readiness checks open one per probe
            "alembic": {"level": max(logging.WARNING, logging.getLevelName(root_level))},
        },
    }


def configure(*, level: str = "info", fmt: str = "json") -> None:
    """Route this process's logs to stderr as `logging_config` describes."""
    logging.config.dictConfig(logging_config(level, fmt))


def mask_url(url: str) -> str:
    """`mysql+pymysql://user:secret@host/db` → `mysql+pymysql://user:***@host/db`."""
    scheme, sep, rest = url.partition("://")
    creds, at, host = rest.rpartition("@")
    if not sep or not at or ":" not in creds:
        return url
    return f"{scheme}://{creds.split(':', 1)[0]}:***@{host}"
