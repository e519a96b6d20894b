"""Where the demo's table lives: a Hadoop catalog in the run's folder (`file`, the default), or
lakelock's catalog front on an S3 warehouse (`s3`).

    lake = Lake.open("s3", workdir)                       # the project's S3 server (demo.s3)
    lake = Lake.open("s3", workdir, endpoint="https://s3.eu-west-1.amazonaws.com", bucket="b")
    lake.service_env()           # the service's catalog front settings (s3), or none (file)
    lake.catalog(service)        # the jobs' Spark catalog
    lake.checkpoint("ingest")    # the streaming query's checkpoint (s3a:// on S3)
    lake.trino_catalog(service)  # a Trino catalog reading the table (on S3: the front)
    lake.sample(table, service)  # the table's files now (demo.health)

On S3 the table is `lakelock.db.events` of the front (a REST catalog, its warehouse
`s3://<bucket>/lakelock-demo/<run>`), the query's checkpoints are on `s3a://` beside it, and the
landing folder stays local (the generator's). Keys come from the standard AWS variables: the
project's server's own when the run starts it, the environment's for `endpoint`.
"""

from __future__ import annotations

import os
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from demo.health import Health, sample, sample_table
from demo.s3 import BUCKET, REGION, LocalS3
from jobkit.spark import CatalogConfig

__all__ = ["CATALOG", "STORAGES", "Lake"]

STORAGES = ("file", "s3")
CATALOG = "lakelock"  # the front's catalog name, the first part of the table's name on S3


@dataclass
class Lake:
    storage: str
    workdir: Path
    warehouse: str
    s3: LocalS3 | None = None
    endpoint: str | None = None
    region: str = REGION

    @classmethod
    def open(
        cls,
        storage: str,
        workdir: Path,
        *,
        endpoint: str | None = None,
        bucket: str = BUCKET,
    ) -> Lake:
        """The run's lake; on S3 without `endpoint`, the project's S3 server is started in
        `workdir/s3` (stop it with `close`).

        Raises:
            ValueError: an unknown storage.
        """
        if storage not in STORAGES:
            raise ValueError(f"storage {storage!r}: one of {', '.join(STORAGES)}")
        if storage == "file":
            return cls(storage, workdir, (workdir / "warehouse").resolve().as_uri())
        warehouse = f"s3://{bucket}/lakelock-demo/{uuid.uuid4().hex[:12]}"
        if endpoint is not None:
            region = os.environ.get("AWS_REGION") or os.environ.get("AWS_DEFAULT_REGION") or REGION
            return cls(storage, workdir, warehouse, endpoint=endpoint, region=region)
        server = LocalS3.start(workdir / "s3", bucket=bucket)
        os.environ.update(server.env)  # the jobs' and the service's keys: the AWS chain
        return cls(storage, workdir, warehouse, s3=server, endpoint=server.endpoint)

    @property
    def on_s3(self) -> bool:
        return self.storage == "s3"

    def table(self, name: str) -> str:
        """The demo's table name in this lake: `local.db.events` on local files, the front's
        `lakelock.db.events` on S3."""
        return f"{CATALOG}.{name.split('.', 1)[1]}" if self.on_s3 else name

    def service_env(self, *, folder: str = "") -> dict[str, str]:
        """The service's settings for this lake; with `folder`, for a front of another
        warehouse beside the table's (`<warehouse>-<folder>`, a reader's copies)."""
        if not self.on_s3:
            return {}
        return {
            "LAKELOCK_CATALOG_WAREHOUSE": self._warehouse(folder),
            "LAKELOCK_CATALOG_NAME": CATALOG,
            "LAKELOCK_CATALOG_S3_ENDPOINT": self.endpoint or "",
            "LAKELOCK_CATALOG_S3_REGION": self.region,
            "LAKELOCK_CATALOG_S3_PATH_STYLE": "true" if self.s3 is not None else "false",
        }

    def s3_properties(self) -> dict[str, str]:
        """The S3 settings of a client of the lake, Iceberg's names (pyiceberg reads them
        too); no key. Empty on local files."""
        if not self.on_s3:
            return {}
        found = {"client.region": self.region, "s3.region": self.region}
        if self.endpoint:
            found["s3.endpoint"] = self.endpoint
        if self.s3 is not None:
            found["s3.path-style-access"] = "true"
        return found

    def catalog(self, service: Any) -> CatalogConfig:
        """The jobs' Spark catalog: the Hadoop one in the run's folder, or the front."""
        if not self.on_s3:
            return CatalogConfig(warehouse=str(self.workdir / "warehouse"))
        return self.front_catalog(service, CATALOG, role="job")

    def front_catalog(
        self, service: Any, name: str, *, role: str, folder: str = ""
    ) -> CatalogConfig:
        """A Spark catalog `name` on `service`'s front on S3, as the token of `role`; with
        `folder`, on a front of that warehouse (service_env)."""
        return CatalogConfig(
            name=name,
            type="rest",
            warehouse=self._warehouse(folder),
            properties={
                "uri": f"{service.url}/iceberg",
                "token": service.token(role),
                **self.s3_properties(),
            },
        )

    def _warehouse(self, folder: str) -> str:
        return f"{self.warehouse}-{folder}" if folder else self.warehouse

    def trino_catalog(self, service: Any) -> dict[str, str]:
        """A Trino catalog (demo.trino) on `service`'s front on S3, as the reader token (name
        it CATALOG in Trino and the table's name is the jobs'). Its S3 keys are the
        environment's, as the jobs' are."""
        from demo.trino import front_catalog

        s3 = {
            "endpoint": self.endpoint or f"https://s3.{self.region}.amazonaws.com",
            "region": self.region,
            "access-key": os.environ.get("AWS_ACCESS_KEY_ID", ""),
            "secret-key": os.environ.get("AWS_SECRET_ACCESS_KEY", ""),
        }
        return front_catalog(f"{service.url}/iceberg", service.token("reader"), s3=s3)

    def checkpoint(self, name: str) -> str:
        if not self.on_s3:
            return str(self.workdir / "checkpoints" / name)
        return f"s3a://{self.warehouse.removeprefix('s3://')}-checkpoints/{name}"

    def rest(self, service: Any) -> Any:
        """pyiceberg's client of the front (its S3 settings from the front's /v1/config)."""
        from pyiceberg.catalog.rest import RestCatalog

        return RestCatalog(CATALOG, uri=f"{service.url}/iceberg", token=service.token("reader"))

    def sample(self, table: str, service: Any) -> Health:
        """The table's live files now (demo.health).

        Raises:
            FileNotFoundError: the table has no metadata yet (on local files).
        """
        if not self.on_s3:
            return sample(self.workdir / "warehouse", table)
        return sample_table(self.rest(service).load_table(table.split(".", 1)[1]))

    def metadata_location(self, table: str, service: Any) -> str:
        """The table's current metadata file, as its catalog names it."""
        if not self.on_s3:
            from service.ops.iceberg_audit import metadata_file

            return str(metadata_file(self.workdir / "warehouse", table))
        location: str = self.rest(service).load_table(table.split(".", 1)[1]).metadata_location
        return location

    def close(self) -> None:
        if self.s3 is not None:
            self.s3.stop()
