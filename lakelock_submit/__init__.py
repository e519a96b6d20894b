"""What `spark-submit` needs from an installed lakelock: the jobs' entry scripts, the Iceberg
runtime jar of the `spark` extra, and the Python the executors run.

    spark-submit --master spark://host:7077 --jars "$(python -m lakelock_submit jars)" \
        --py-files "$(python -m lakelock_submit py-files)" \
        "$(python -m lakelock_submit ingest)" --config ingest.toml

The executors run one piece of lakelock's Python: the ingest job's record decoder (one
`mapPartitions` per micro-batch). It needs the standard library and pyspark only, so it travels
with the submit as a zip of the `ingest_gate` and `jobkit` packages (`--py-files`), and a worker
needs no more than a Python of the driver's minor version: nothing of lakelock installed.

spark-submit runs a Python application from a `.py` file and puts that file's folder first on
`sys.path`, so the entry scripts live here, in a folder of their own: run from inside a package
they would shadow its modules (and `jobkit/token.py` the standard library's `token`).
Recipes for standalone, YARN, Kubernetes and EMR: docs/spark-submit.md.
"""

from __future__ import annotations

import hashlib
import importlib
import os
import tempfile
import zipfile
from pathlib import Path

__all__ = ["SCRIPTS", "EXECUTOR_PACKAGES", "script", "jars", "py_files"]

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
    from jobkit.spark import bundled_iceberg_jar

    return [bundled_iceberg_jar()]


EXECUTOR_PACKAGES = ("ingest_gate", "jobkit")
"""The packages the executors import from: the decoder and what it imports."""


def py_files(folder: Path | None = None) -> Path:
    """A zip of the Python the executors run (`EXECUTOR_PACKAGES`), for `--py-files`.

    Named by a hash of its sources and made once per folder (default: the system's temporary
    folder), so repeated submits of one install share it and another version gets its own.
    """
    sources = []
    for name in EXECUTOR_PACKAGES:
        package = Path(importlib.import_module(name).__file__ or "").resolve().parent
        sources += [(f"{name}/{source.name}", source) for source in sorted(package.glob("*.py"))]
    digest = hashlib.sha256()
    for name, source in sources:
        digest.update(name.encode() + b"\0" + source.read_bytes())
    folder = folder or Path(tempfile.gettempdir()) / "lakelock-submit"
    out = folder / f"lakelock-executors-{digest.hexdigest()[:16]}.zip"
    if not out.is_file():
        folder.mkdir(parents=True, exist_ok=True)
        partial = folder / f".{out.name}.{os.getpid()}"
        with zipfile.ZipFile(partial, "w", zipfile.ZIP_DEFLATED) as archive:
            for name, source in sources:
                archive.write(source, name)
        partial.replace(out)
    return out
