"""The tests' Spark drivers map the class-data archive bin/test made (testkit.spark_cds): were
the archive to stop matching their class path, the JVM would say nothing and every driver would
start slower. The in-process driver is a spark-submit like the jobs' (SPARK_SUBMIT_OPTS reaches
both): the archive is among the files its JVM maps."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

pytestmark = pytest.mark.spark


def _archive() -> Path:
    named = os.environ.get("LAKELOCK_TEST_SPARK_CDS")
    if named:
        return Path(named)
    if os.environ.get("CI"):
        pytest.fail("no class-data archive in CI: bin/test makes it (python -m testkit.spark_cds)")
    pytest.skip("no class-data archive (bin/test makes it: python -m testkit.spark_cds)")


def test_the_driver_maps_the_class_data_archive(spark: Any) -> None:
    archive = _archive()
    pid = spark.sparkContext._jvm.java.lang.ProcessHandle.current().pid()
    mapped = {line.split()[-1] for line in Path(f"/proc/{pid}/maps").read_text().splitlines()}
    assert str(archive) in mapped, f"the driver (pid {pid}) runs without {archive}"
