"""`python -m ingest_gate` / `lakelock-ingest`: run the streaming upsert job.

    lakelock-ingest                                   # defaults: ./var/, local service
    lakelock-ingest --config ingest.toml --policy proceed
    lakelock-ingest --available-now --no-gate         # drain the landing folder once, no service

Exit status: 0 when the query stopped as configured, 1 when it failed (the last batch's error is
logged; a restart resumes from the checkpoint), 2 for a bad configuration, a missing table or a
table the job cannot write (one line says which and what to do), 3 when its Kafka topics no
longer hold records it has not read (the ranges and the ways on are named; ingest_gate.job.kafka).
At the end it logs the run's summary: files read, records, bad, skipped, changes, deletes.
"""

from __future__ import annotations

import json
import logging
import sys
from collections.abc import Sequence

from ingest_gate.job.config import ConfigError, config_from_args
from jobkit.token import TOKEN_ENV, refused_token
from service.extras import needs_extras, require

__all__ = ["main"]

log = logging.getLogger("ingest_gate")


def main(argv: Sequence[str] | None = None) -> int:
    """Wire config, session and query; wait for the configured bound."""
    with needs_extras("lakelock-ingest"):
        return _main(argv)


def _main(argv: Sequence[str] | None) -> int:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s %(message)s")
    try:
        config = config_from_args(argv)
    except ConfigError as exc:
        print(exc, file=sys.stderr)
        return 2
    require("pyspark")  # before anything is said about the run
    if config.gate_enabled and not config.lakelock_token:
        log.warning(
            "%s is not set: sending no token, which only a service with LAKELOCK_AUTH=off accepts",
            TOKEN_ENV,
        )
    from ingest_gate.job.kafka import RetentionLoss
    from ingest_gate.job.run import IngestError, TableMissing, run
    from jobkit.maven import MavenMissing
    from jobkit.spark import ConnectorMissing
    from service.wire.errors import Unauthorized

    try:
        handle = run(config)
    except (TableMissing, IngestError) as exc:
        print(exc, file=sys.stderr)
        return 2
    except (ConnectorMissing, MavenMissing) as exc:
        print(f"lakelock-ingest: {exc}", file=sys.stderr)
        return 2
    except RetentionLoss as exc:
        print(f"lakelock-ingest: {exc}", file=sys.stderr)
        return 3
    try:
        handle.wait()
    except KeyboardInterrupt:
        log.info("interrupted: stopping the query; it resumes from the checkpoint")
        handle.stop()
    except Unauthorized:
        # a configuration mistake, not a fault: one line that says which variable to set
        log.error("%s", refused_token(TOKEN_ENV, token=config.lakelock_token))
        return 1
    except Exception:
        log.exception("ingest query %s failed", handle.query_id)
        return 1
    finally:
        summary = handle.summary()
        log.log(
            logging.WARNING if "note" in summary else logging.INFO,
            "run summary: %s",
            json.dumps(summary),
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
