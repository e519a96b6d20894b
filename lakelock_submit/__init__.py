"""What `spark-submit` needs from an installed lakelock: the jobs' entry scripts and the Iceberg
runtime jar of the `spark` extra.

    spark-submit --master spark://host:7077 --jars "$(python -m lakelock_submit jars)" \
        "$(python -m lakelock_submit ingest)" --config ingest.toml

spark-submit runs a Python application from a `.py` file and puts that file's folder first on
`sys.path`, so the entry scripts live here, in a folder of their own: run from inside a package
they would shadow its modules (and `ingest_gate/token.py` the standard library's `token`).
Recipes for standalone, YARN, Kubernetes and EMR: docs/spark-submit.md.
"""

from __future__ import annotations

from pathlib import Path

__all__ = ["SCRIPTS", "script", "jars"]

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
    """The jars the jobs need on the driver and the executors: the Iceberg Spark runtime.

    Raises:
        ModuleNotFoundError, RuntimeError: the `spark` extra is not installed.
    """
    from ingest_gate.spark import bundled_iceberg_jar

    return [bundled_iceberg_jar()]
