"""Flink on this machine: a Python with PyFlink, Iceberg's Flink runtime, and the writer
(`flink_writer`) started in it as a process of its own.

    writer = FlinkWriter.start(args=[...], token=..., log_path=path)   # python -m flink_writer
    writer.job_id(timeout_s=120)      # the Flink job's id, once it runs
    report = writer.stop()            # SIGTERM: the job is cancelled, its checkpoint kept
    report["restarts"], report["status"]

    python -m jobkit.flink            # make the Python and fetch the jars now (bin/test does)
    python -m jobkit.flink --classpath  # the jars a Flink cluster needs for the writer
    lakelock-flink-writer ...         # the writer as a command: checks its options here, then
                                      # runs `python -m flink_writer` in PyFlink's Python (cli)

PyFlink (`apache-flink`) pins NumPy, PyArrow and Beam at versions lakelock's own Python cannot
share, so it gets a virtual environment of its own, made once under the cache
(`~/.cache/lakelock/flink/`, `LAKELOCK_JARS_CACHE`'s sibling) from PyPI, or the interpreter
`LAKELOCK_FLINK_PYTHON` names. Iceberg's Flink runtime and Hadoop's client come from Maven
(`jobkit.maven`'s `flink-iceberg` set) and reach Flink's own classpath through
`HADOOP_CLASSPATH`, which PyFlink's gateway adds (a catalog is made in the client, so
`pipeline.jars` is too late for it); a Kafka or MySQL CDC source adds its connector
(`flink-kafka`, `flink-mysql-cdc`), and a session cluster takes them all (`cluster_classpath`).
PyFlink's Python sees lakelock's `flink_writer` package alone (`writer_path`), never the rest of
the install's packages, whose NumPy and PyArrow are not PyFlink's.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import json
import logging
import os
import signal
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

from jobkit.maven import MavenMissing, cache_root, jars

__all__ = [
    "FLINK_VERSION",
    "FlinkMissing",
    "FlinkWriter",
    "classpath",
    "cli",
    "cluster_classpath",
    "flink_home",
    "main",
    "python",
    "writer_env",
    "writer_path",
]

log = logging.getLogger(__name__)

TOKEN_ENV = "LAKELOCK_TOKEN"
"""The job's lakelock token, in the writer's environment (flink_writer.job reads it)."""

WRITER_MODULE = ("-P", "-m", "flink_writer")
"""How PyFlink's Python runs the writer: `-P` (Python 3.11) keeps the working folder off
`sys.path`, which `-m` would put first: an install's site-packages, say, whose py4j and NumPy
are not PyFlink's."""

FLINK_VERSION = "1.20.3"
"""PyFlink's release: Flink 1.20, whose Iceberg runtime is `iceberg-flink-runtime-1.20`."""

ROOT = Path(__file__).resolve().parent.parent


class FlinkMissing(RuntimeError):
    """PyFlink could not be installed, or its jars fetched: the message says why."""


def _venv() -> Path:
    return cache_root().parent / "flink" / f"apache-flink-{FLINK_VERSION}"


def python() -> Path:
    """An interpreter with PyFlink: `LAKELOCK_FLINK_PYTHON` (Python 3.11, for WRITER_MODULE's
    `-P`), else the cache's, made on first use (a few minutes: PyFlink and its libraries are
    about 700 MB).

    Raises:
        FlinkMissing: the virtual environment could not be made.
    """
    configured = os.environ.get("LAKELOCK_FLINK_PYTHON")
    if configured:
        return Path(configured)
    venv = _venv()
    interpreter = venv / "bin" / "python"
    stamp = venv / ".installed"
    if stamp.is_file():
        return interpreter
    log.info("installing apache-flink %s into %s", FLINK_VERSION, venv)
    venv.parent.mkdir(parents=True, exist_ok=True)
    for step in (
        [sys.executable, "-m", "venv", "--clear", str(venv)],
        [str(interpreter), "-m", "pip", "install", "--quiet", f"apache-flink=={FLINK_VERSION}"],
    ):
        done = subprocess.run(step, capture_output=True, text=True, timeout=1800, check=False)
        if done.returncode != 0:
            tail = "\n".join((done.stdout + done.stderr).strip().splitlines()[-5:])
            raise FlinkMissing(f"{' '.join(step[:4])} failed:\n{tail}")
    stamp.write_text(FLINK_VERSION + "\n")
    return interpreter


_CONNECTORS = {"kafka": ("flink-kafka",), "mysql-cdc": ("flink-mysql-cdc",)}
"""The jar sets (jobkit.maven) of each source the writer reads beyond a folder of files."""


def classpath(*, source: str = "files") -> str:
    """The jars Flink needs for Iceberg and for the writer's `source`, as a class path.

    Raises:
        FlinkMissing: Maven could not fetch them.
    """
    return _joined(("flink-iceberg", *_CONNECTORS.get(source, ())))


def cluster_classpath() -> str:
    """A session cluster's jars: Iceberg's and every source's, so any writer job runs on it.

    Raises:
        FlinkMissing: Maven could not fetch them.
    """
    return _joined(("flink-iceberg", *(s for sets in _CONNECTORS.values() for s in sets)))


def _joined(sets: Sequence[str]) -> str:
    try:
        paths = [str(jar) for name in sets for jar in jars(name)]
    except (MavenMissing, ValueError) as exc:  # ValueError: LAKELOCK_ICEBERG_VERSION
        raise FlinkMissing(str(exc)) from exc
    return os.pathsep.join(dict.fromkeys(paths))


@functools.cache
def flink_home() -> Path:
    """The Flink distribution inside PyFlink's package (its `bin/`, `conf/`, `lib/`), asked
    of PyFlink's own Python once per process.

    Raises:
        FlinkMissing: no PyFlink.
    """
    found = subprocess.run(
        [str(python()), "-c", "import pyflink, os; print(os.path.dirname(pyflink.__file__))"],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    if found.returncode != 0:
        raise FlinkMissing(f"PyFlink's folder not found: {found.stderr.strip()[-500:]}")
    return Path(found.stdout.strip())


def writer_path() -> Path:
    """A folder holding only the `flink_writer` package (a link to it), for PyFlink's
    `PYTHONPATH`: whether lakelock runs from a checkout or an install's site-packages, PyFlink's
    Python imports the writer and nothing else of lakelock's."""
    package = ROOT / "flink_writer"
    digest = hashlib.sha256(str(package).encode()).hexdigest()[:12]
    folder = _venv().parent / f"writer-{digest}"
    link = folder / "flink_writer"
    if not link.exists():
        folder.mkdir(parents=True, exist_ok=True)
        with contextlib.suppress(FileExistsError):  # another process made it first
            link.symlink_to(package, target_is_directory=True)
    return folder


def writer_env(token: str, *, source: str = "files", jars: Sequence[Path] = ()) -> dict[str, str]:
    """The environment of a `python -m flink_writer` process: Flink's jars (Iceberg's runtime,
    the connector of its `source`, `jars`, and those already in `HADOOP_CLASSPATH`: a JDBC
    driver, say), the job's token, the writer's package.

    Raises:
        FlinkMissing: the jars could not be fetched.
    """
    own = [p for p in os.environ.get("HADOOP_CLASSPATH", "").split(os.pathsep) if p]
    return {
        **os.environ,
        "HADOOP_CLASSPATH": os.pathsep.join([classpath(source=source), *map(str, jars), *own]),
        TOKEN_ENV: token,
        "PYTHONPATH": str(writer_path()),
    }


@dataclass
class FlinkWriter:
    """A `python -m flink_writer` process (flink_writer.job) and where it reports."""

    process: subprocess.Popen[bytes]
    report_path: Path
    log_path: Path
    _log: IO[bytes]

    @classmethod
    def start(
        cls, *, args: list[str], token: str, log_path: Path, jars: tuple[Path, ...] = ()
    ) -> FlinkWriter:
        """Start the writer with `args` (flink_writer.job's options, `--report` added), the
        job's lakelock token in its environment, `jars` (a JDBC driver) on Flink's classpath.

        Raises:
            FlinkMissing: no PyFlink, or no jars.
        """
        report_path = log_path.with_suffix(".report.json")
        report_path.unlink(missing_ok=True)
        source = "files"
        for i, arg in enumerate(args):
            if arg == "--source" and i + 1 < len(args):
                source = args[i + 1]
            elif arg.startswith("--source="):
                source = arg.split("=", 1)[1]
        env = writer_env(token, source=source, jars=jars)
        log_file = log_path.open("ab")
        process = subprocess.Popen(
            [str(python()), *WRITER_MODULE, *args, "--report", str(report_path)],
            env=env,
            cwd=ROOT,
            stdout=log_file,
            stderr=subprocess.STDOUT,
        )
        return cls(process, report_path, log_path, log_file)

    def job_id(self, *, timeout_s: float) -> str:
        """The Flink job's id, once the writer printed it.

        Raises:
            RuntimeError: the writer ended first, or did not start within `timeout_s`.
        """
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            for line in self.log_path.read_text(errors="replace").splitlines():
                if line.startswith('{"job_id"'):
                    return str(json.loads(line)["job_id"])
            if self.process.poll() is not None:
                raise RuntimeError(f"the Flink writer ended before its job ran: {self._tail()}")
            time.sleep(0.5)
        raise RuntimeError(f"the Flink writer's job did not start in {timeout_s:g}s")

    def running(self) -> bool:
        return self.process.poll() is None

    def stop(self, *, timeout_s: float = 120.0) -> dict[str, Any]:
        """Cancel the job (SIGTERM; its last checkpoint is kept), wait for the process, and
        answer its report (job_id, status, restarts, checkpoints, error).

        Raises:
            RuntimeError: the writer left no report.
        """
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
        return self.wait(timeout_s=timeout_s)

    def wait(self, *, timeout_s: float) -> dict[str, Any]:
        """Wait for the writer to end (a bounded job finishes by itself; killed past
        `timeout_s`) and answer its report, as `stop`.

        Raises:
            RuntimeError: the writer left no report.
        """
        try:
            self.process.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
        self._log.close()
        if not self.report_path.is_file():
            raise RuntimeError(f"the Flink writer left no report: {self._tail()}")
        report: dict[str, Any] = json.loads(self.report_path.read_text())
        return report

    def _tail(self) -> str:
        lines = self.log_path.read_text(errors="replace").splitlines()
        return "\n".join([line for line in lines if not line.startswith("\t")][-15:])


def cli(argv: Sequence[str] | None = None) -> int:
    """`lakelock-flink-writer`: flink_writer's options are checked (and `--help` answered) in
    this Python; then PyFlink's Python is made if missing, the jars fetched, and the writer
    runs in its place (`exec`: signals reach the writer, its exit status is the command's)."""
    from flink_writer.job import parse

    args = list(sys.argv[1:] if argv is None else argv)
    _, options, token = parse(args, prog="lakelock-flink-writer")
    try:
        env = writer_env(token, source=options.source)
        interpreter = str(python())
    except FlinkMissing as exc:
        print(f"lakelock-flink-writer: {exc}", file=sys.stderr)
        return 1
    os.execve(interpreter, [interpreter, *WRITER_MODULE, *args], env)


def main(argv: Sequence[str] | None = None) -> int:
    """`python -m jobkit.flink`: make PyFlink's Python and fetch the jars, so no test waits;
    `--classpath` prints the jars a Flink cluster needs for the writer (for its `lib/` or its
    `HADOOP_CLASSPATH`), one per line."""
    try:
        interpreter = python()
        jar_path = cluster_classpath()
    except FlinkMissing as exc:
        print(exc, file=sys.stderr)
        return 1
    if "--classpath" in (sys.argv[1:] if argv is None else argv):
        print("\n".join(jar_path.split(os.pathsep)))
        return 0
    print(f"flink: {interpreter}; {len(jar_path.split(os.pathsep))} jars")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
