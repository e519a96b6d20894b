"""A fresh local lake for a benchmark: a Spark session on a Hadoop warehouse and a lakelock
service on SQLite, both under `out` (emptied first), stopped on exit.

    with local_lake(args.out, app_name="lakelock-fleet-benchmark") as (spark, service):
        ...
"""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from testkit import LocalService

__all__ = ["local_lake"]


@contextmanager
def local_lake(out: Path, *, app_name: str) -> Iterator[tuple[Any, LocalService]]:
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir(parents=True)
    from jobkit.spark import CatalogConfig, build_session

    spark = build_session(
        CatalogConfig(warehouse=str((out / "warehouse").resolve())),
        app_name=app_name,
        master="local[2]",
        extra_conf={"spark.sql.shuffle.partitions": "2"},
    )
    try:
        service = LocalService.start(
            db_url=f"sqlite:///{(out / 'lakelock.db').resolve()}", log_path=out / "service.log"
        )
        try:
            yield spark, service
        finally:
            service.stop()
    finally:
        spark.stop()
