"""What `spark-submit` needs from an installed lakelock: the jobs' entry scripts, the Iceberg
runtime jar of the `spark` extra, and the Python the executors run.

    spark-submit --master spark://host:7077 --jars "$(python -m lakelock_submit jars)" \
        --py-files "$(python -m lakelock_submit py-files)" \
        "$(python -m lakelock_submit ingest)" --config ingest.toml

The executors run one piece of lakelock's Python: the ingest job's record decoder (one
`mapPartitions` per micro-batch). It needs the standard library and pyspark only, so it travels
with the submit as a zip of the packages it sits in and imports (`ingest_gate`,
`ingest_gate.job`, `jobkit`; `--py-files`; the job adds it itself when a submit did not carry
it), and a worker needs no more than a Python of the driver's minor version: nothing of
lakelock installed.

spark-submit runs a Python application from a `.py` file and puts that file's folder first on
`sys.path`, so the entry scripts live here, in a folder of their own: run from inside a package
they would shadow its modules (and `jobkit/token.py` the standard library's `token`).
Recipes for standalone, YARN, Kubernetes and EMR: docs/spark-submit.md.
"""

from __future__ import annotations

from pathlib import Path

__all__ = ["SCRIPTS", "jars", "py_files", "script"]

_HERE = Path(__file__).resolve().parent

SCRIPTS = {"ingest": "ingest_job.py", "compactor": "compactor_job.py"}
"""Job name -> its entry script; each takes the arguments of `lakelock-<job>`."""


def script(job: str) -> Path:
    """The entry script of `job` (`ingest` or `compactor`), to pass to spark-submit.

    Raises:
        KeyError: an unknown job.
    """
    return _HERE / SCRIPTS[job]


def jars() -> list[Path]:
    """The jars the jobs need on the driver and the executors: the Iceberg Spark runtime of
    the jobs' Iceberg (jobkit.spark.iceberg_runtime).

    Raises:
        ModuleNotFoundError, RuntimeError: the `spark` extra is not installed.
        jobkit.spark.IcebergMissing: LAKELOCK_ICEBERG_VERSION names an unknown version.
        jobkit.maven.MavenMissing: 1.11.0's jar is not cached and Maven cannot fetch it.
    """
    from jobkit.spark import iceberg_runtime

    return iceberg_runtime()


def py_files(folder: Path | None = None) -> Path:
    """A zip of the Python the executors run (`ingest_gate.job.EXECUTOR_PACKAGES`), for
    `--py-files`; made once per version of the sources (jobkit.executors.py_files)."""
    from ingest_gate.job import EXECUTOR_PACKAGES
    from jobkit.executors import py_files as zipped

    return zipped(EXECUTOR_PACKAGES, folder)
