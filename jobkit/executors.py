"""The Python the executors run, and which Python runs it.

    python_for_local_workers()          # a local master: the workers start the driver's Python
    py_files(("ingest_gate", "ingest_gate.job", "jobkit"))  # a cluster: a zip, for --py-files

The ingest job's record decoder is the one piece of lakelock that runs on executors (one
`mapPartitions` per micro-batch); it imports `ingest_gate` and `jobkit` and the standard
library. PySpark starts its Python workers with `PYSPARK_PYTHON`, else `python3` from PATH: on
a local master that is whatever `python3` the user's shell finds, not the virtualenv the job
was installed in, so a job run unactivated, or from a service unit or a cron line, fails with
`ModuleNotFoundError: No module named 'ingest_gate'` at its first batch. The driver's own
interpreter has lakelock installed, so a local master's workers run that. A cluster's workers
have a Python of their own (the cluster's `PYSPARK_PYTHON`) and nothing of lakelock: the
packages go with the job as a zip, added by the job itself when the submit did not carry it.
"""

from __future__ import annotations

import hashlib
import importlib
import os
import sys
import tempfile
import zipfile
from collections.abc import Sequence
from pathlib import Path

__all__ = ["ZIP_PREFIX", "py_files", "python_for_local_workers"]

ZIP_PREFIX = "lakelock-executors-"


def python_for_local_workers() -> str:
    """Make a local master's Python workers run this interpreter, unless PYSPARK_PYTHON names
    another; return the one they will run. Call before the SparkContext starts (PySpark reads
    the variable once, when the context is made)."""
    return os.environ.setdefault("PYSPARK_PYTHON", sys.executable)


def py_files(packages: Sequence[str], folder: Path | None = None) -> Path:
    """A zip of `packages` (dotted names; each one's modules, not its subpackages), for
    `--py-files` or `SparkContext.addPyFile`.

    Named by a hash of its sources and made once per folder (default: the system's temporary
    folder), so repeated submits of one install share it and another version gets its own.
    """
    sources = []
    for name in packages:
        package = Path(importlib.import_module(name).__file__ or "").resolve().parent
        prefix = name.replace(".", "/")  # a subpackage's modules go in its own folder
        sources += [(f"{prefix}/{source.name}", source) for source in sorted(package.glob("*.py"))]
    digest = hashlib.sha256()
    for name, source in sources:
        digest.update(name.encode() + b"\0" + source.read_bytes())
    folder = folder or Path(tempfile.gettempdir()) / "lakelock-submit"
    out = folder / f"{ZIP_PREFIX}{digest.hexdigest()[:16]}.zip"
    if not out.is_file():
        folder.mkdir(parents=True, exist_ok=True)
        partial = folder / f".{out.name}.{os.getpid()}"
        with zipfile.ZipFile(partial, "w", zipfile.ZIP_DEFLATED) as archive:
            for name, source in sources:
                archive.write(source, name)
        partial.replace(out)
    return out
