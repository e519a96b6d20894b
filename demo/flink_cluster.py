"""A standalone Flink session cluster on loopback, from PyFlink's own distribution: a
JobManager and TaskManagers, each a process of its own (`jobmanager.sh` and `taskmanager.sh
start-foreground`), with Iceberg's Flink runtime and the Kafka and MySQL CDC connectors on the
cluster's classpath (`HADOOP_CLASSPATH`, which Flink's scripts add;
`jobkit.flink.cluster_classpath`).

    bin/flink-cluster --port 8081 --dir var/flink-cluster   # foreground, until SIGTERM/Ctrl-C
    lakelock-flink-writer --jobmanager 127.0.0.1:8081 ...     # a job submitted to it

    with FlinkCluster.start(Path("/tmp/f")) as cluster:       # a free loopback port
        cluster.address                                       # "127.0.0.1:PORT" (REST)
        cluster.kill_taskmanager()                            # SIGKILL, as a lost host
        cluster.add_taskmanager()
        cluster.flink("stop", "--savepointPath", uri, job_id) # Flink's own CLI on it

For the tests, the demo and anyone trying the Flink writer on a cluster on one machine: every
port listens on 127.0.0.1; heartbeats are short, so a killed TaskManager is noticed within
seconds and its jobs restart on another from their last checkpoint (docs/flink.md).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import time
import urllib.request
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType

from demo.service import foreground, free_port, terminate
from jobkit.flink import cluster_classpath, flink_home

__all__ = ["FlinkCluster", "main"]

_SETTINGS = {
    "jobmanager.rpc.address": "127.0.0.1",
    "jobmanager.bind-host": "127.0.0.1",
    "jobmanager.memory.process.size": "1024m",
    "taskmanager.bind-host": "127.0.0.1",
    "taskmanager.host": "127.0.0.1",
    "taskmanager.memory.process.size": "1536m",
    "rest.address": "127.0.0.1",
    "rest.bind-address": "127.0.0.1",
    "heartbeat.interval": "1000",
    "heartbeat.timeout": "8000",
}
"""Each process's settings over the distribution's `conf/config.yaml` (which keeps the JVM's
module options), given as `-D` options: loopback only, small memory, short heartbeats."""


@dataclass
class FlinkCluster:
    folder: Path
    port: int
    settings: dict[str, str]
    jobmanager: subprocess.Popen[bytes]
    taskmanagers: list[subprocess.Popen[bytes]] = field(default_factory=list)

    @classmethod
    def start(
        cls, folder: Path, *, port: int | None = None, slots: int = 2, timeout_s: float = 120.0
    ) -> FlinkCluster:
        """A JobManager on `port` (default: free) and one TaskManager of `slots` slots, their
        configuration and logs in `folder`; answers once the TaskManager has registered.

        Raises:
            jobkit.flink.FlinkMissing: no PyFlink, or no jars.
            RuntimeError: a process exited, or the cluster was not up within `timeout_s`.
        """
        folder = folder.resolve()
        conf = folder / "conf"
        conf.mkdir(parents=True, exist_ok=True)
        for shipped in (flink_home() / "conf").glob("*"):
            if shipped.is_file():
                shutil.copy(shipped, conf / shipped.name)
        port = port or free_port()
        settings = {
            **_SETTINGS,
            "jobmanager.rpc.port": str(free_port()),
            "rest.port": str(port),
            "taskmanager.numberOfTaskSlots": str(slots),
        }
        cluster = cls(folder, port, settings, cls._spawn(folder, "jobmanager", settings))
        try:
            cluster.add_taskmanager(timeout_s=timeout_s)
        except BaseException:
            cluster.stop()
            raise
        return cluster

    @staticmethod
    def _spawn(folder: Path, role: str, settings: dict[str, str]) -> subprocess.Popen[bytes]:
        env = {
            **os.environ,
            "FLINK_CONF_DIR": str(folder / "conf"),
            "FLINK_LOG_DIR": str(folder / "log"),
            "HADOOP_CLASSPATH": cluster_classpath(),
        }
        out = (folder / f"{role}.out").open("ab")
        try:
            return subprocess.Popen(
                [
                    *("bash", str(flink_home() / "bin" / f"{role}.sh"), "start-foreground"),
                    *(arg for key, value in settings.items() for arg in ("-D", f"{key}={value}")),
                ],
                env=env,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,  # a Ctrl-C of the shell reaches us, and we stop it
            )
        finally:
            out.close()

    @property
    def address(self) -> str:
        """The JobManager's REST address, which `flink run -m` and `--jobmanager` take."""
        return f"127.0.0.1:{self.port}"

    def registered(self) -> set[str]:
        """The ids of the TaskManagers the JobManager knows (none while it is not up)."""
        try:
            url = f"http://{self.address}/taskmanagers"
            with urllib.request.urlopen(url, timeout=5) as answer:
                return {str(tm["id"]) for tm in json.load(answer).get("taskmanagers", [])}
        except OSError:
            return set()

    def add_taskmanager(self, *, timeout_s: float = 120.0) -> subprocess.Popen[bytes]:
        """Start another TaskManager and wait until the JobManager has registered it (a new
        id: one killed stays registered until its heartbeat times out).

        Raises:
            RuntimeError: it or the JobManager exited, or it did not register in `timeout_s`.
        """
        known = self.registered()
        process = self._spawn(self.folder, "taskmanager", self.settings)
        self.taskmanagers.append(process)
        deadline = time.monotonic() + timeout_s
        while not self.registered() - known:
            for role, proc in (("jobmanager", self.jobmanager), ("taskmanager", process)):
                if proc.poll() is not None:
                    raise RuntimeError(f"the Flink {role} exited; see {self.folder}/{role}.out")
            if time.monotonic() > deadline:
                raise RuntimeError(f"no TaskManager joined in {timeout_s:g}s; see {self.folder}")
            time.sleep(0.5)
        return process

    def kill_taskmanager(self) -> None:
        """SIGKILL the oldest live TaskManager, as a host that is lost."""
        for process in self.taskmanagers:
            if process.poll() is None:
                os.killpg(process.pid, signal.SIGKILL)
                process.wait(30)
                return
        raise RuntimeError("no live TaskManager to kill")

    def flink(self, *args: str, timeout_s: float = 300.0) -> subprocess.CompletedProcess[str]:
        """Flink's own CLI (`bin/flink`) against this cluster: `-m` is added after the verb."""
        env = {**os.environ, "FLINK_CONF_DIR": str(self.folder / "conf")}
        verb, *rest = args
        return subprocess.run(
            ["bash", str(flink_home() / "bin" / "flink"), verb, "-m", self.address, *rest],
            env=env,
            capture_output=True,
            text=True,
            timeout=timeout_s,
            check=False,
        )

    def stop(self, timeout_s: float = 60.0) -> None:
        """SIGTERM each process (SIGKILL after `timeout_s`), TaskManagers first."""
        for process in [*self.taskmanagers, self.jobmanager]:
            terminate(process, timeout_s)

    def __enter__(self) -> FlinkCluster:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="bin/flink-cluster",
        description="Run a Flink session cluster (a JobManager and a TaskManager) on 127.0.0.1 "
        "in the foreground, until SIGTERM or Ctrl-C.",
    )
    parser.add_argument("--port", type=int, default=8081, help="REST port (default 8081)")
    parser.add_argument("--dir", type=Path, default=Path("var/flink-cluster"), help="its folder")
    parser.add_argument("--slots", type=int, default=2, help="the TaskManager's slots")
    args = parser.parse_args(argv)
    return foreground(
        lambda: FlinkCluster.start(args.dir, port=args.port, slots=args.slots),
        lambda cluster: (
            f"flink on {cluster.address} (logs in {cluster.folder}); submit with "
            f"lakelock-flink-writer --jobmanager {cluster.address}; stop with SIGTERM"
        ),
        lambda cluster: cluster.jobmanager,
    )


if __name__ == "__main__":
    sys.exit(main())
