"""Serve the app with uvicorn: one process, or workers under uvicorn's supervisor.

serve(settings)      # until SIGTERM or SIGINT; 0 after a graceful stop, 3 if it never started
"""

from __future__ import annotations

import signal
from types import FrameType
from typing import TYPE_CHECKING

import uvicorn
from uvicorn.supervisors import Multiprocess

if TYPE_CHECKING:
    from service.server.settings import Settings

__all__ = ["CleanExitServer", "serve"]


def serve(settings: Settings) -> int:
    """Serve until stopped; the exit status of `python -m service`."""
    from service.server.logs import logging_config

    config = uvicorn.Config(
        "service.server.app:create_app",
        factory=True,
        host=settings.host,
        port=settings.port,
        workers=settings.workers,
        # behind the load balancer, the client's address is the one X-Forwarded-For names, but
        # only a peer in LAKELOCK_TRUSTED_PROXIES is believed: anyone else could name any
        # address, and the request log would record it. Without proxies the header is ignored.
        proxy_headers=bool(settings.proxies),
        forwarded_allow_ips=settings.proxies,
        # each worker process configures its logging from this, not from main()
        log_config=logging_config(settings.log_level, settings.log_format),
        access_log=False,  # service.server.middleware logs one JSON line per request instead
        # longer than a load balancer's idle timeout: the side that closes first must be its
        timeout_keep_alive=int(settings.keep_alive_s),
        timeout_graceful_shutdown=(
            settings.shutdown_grace_s  # type: ignore[arg-type]  # uvicorn waits any float
        ),
    )
    if settings.workers > 1:
        from service.server.metrics import multiprocess_folder

        # set before the workers start: each one's counters go to files there, and a scrape
        # answered by any worker sums them all
        with multiprocess_folder():
            # the supervisor sends SIGTERM on to every worker, whose app wakes its own
            # long-polls (service.server.app), and returns once they have all exited
            Multiprocess(config, sockets=[config.bind_socket()]).run()
        return 0
    server = CleanExitServer(config)
    server.run()
    return 0 if server.started else 3


class CleanExitServer(uvicorn.Server):
    """A uvicorn server whose process exits 0 after a graceful stop on SIGTERM or SIGINT.

    uvicorn re-raises the signal it caught once it has shut down, so the process would die of
    SIGTERM (status 143) although it stopped cleanly, and ECS would show every stop as a crash.
    Pending long-polls are woken by the app itself (service.server.app), not here.
    """

    def handle_exit(self, sig: int, frame: FrameType | None) -> None:
        # uvicorn's handle_exit, minus recording the signal for the re-raise
        if self.should_exit and sig == signal.SIGINT:
            self.force_exit = True
        else:
            self.should_exit = True
