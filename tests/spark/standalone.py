"""A Spark standalone cluster on loopback, from what pyspark ships, and spark-submit against it.

    cluster = StandaloneCluster.start(workdir, workers=2)   # master + workers, 1 core each
    cluster.master_url                                      # spark://127.0.0.1:<port>
    cluster.submit(args, env=...)                           # spark-submit --master <it> ...
    cluster.executors()                                     # pids of the executors running now
    cluster.stop()

Master and workers are `bin/spark-class` processes of pyspark's own Spark, started with a bare
environment: PATH without any virtualenv, no PYTHONPATH, an empty conf folder, Spark's own jars
only. So whatever an executor needs beyond Spark (the Iceberg runtime) reaches it only through
the submit (`--jars`), which the executor fetches into its work folder under `workdir/work`.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

import httpx

from testkit import free_port
from testkit.spark_cds import spark_home

__all__ = ["StandaloneCluster", "spark_home"]


def _bare_env(workdir: Path, **extra: str) -> dict[str, str]:
    conf = workdir / "conf"
    conf.mkdir(exist_ok=True)
    env = {
        "PATH": "/usr/bin:/bin",
        "HOME": os.environ.get("HOME", str(workdir)),
        "SPARK_HOME": str(spark_home()),
        "SPARK_CONF_DIR": str(conf),
        "SPARK_LOCAL_IP": "127.0.0.1",
        "SPARK_DAEMON_MEMORY": "256m",
    }
    if os.environ.get("JAVA_HOME"):
        env["JAVA_HOME"] = os.environ["JAVA_HOME"]
    env.update(extra)
    return env


@dataclass
class StandaloneCluster:
    workdir: Path
    master_url: str
    ui_url: str
    processes: list[subprocess.Popen] = field(default_factory=list)

    @classmethod
    def start(
        cls, workdir: Path, *, workers: int = 2, cores: int = 1, memory: str = "1g"
    ) -> StandaloneCluster:
        """Start a master and `workers` workers; return once every worker has registered.

        Raises:
            RuntimeError: a process exited, or the workers did not register within 120 s.
        """
        port, ui_port = free_port(), free_port()
        cluster = cls(workdir, f"spark://127.0.0.1:{port}", f"http://127.0.0.1:{ui_port}")
        spark_class = str(spark_home() / "bin" / "spark-class")
        cluster._spawn(
            "master",
            [
                spark_class,
                "org.apache.spark.deploy.master.Master",
                "--host",
                "127.0.0.1",
                "--port",
                str(port),
                "--webui-port",
                str(ui_port),
            ],
        )
        for i in range(workers):
            cluster._spawn(
                f"worker-{i}",
                [
                    spark_class,
                    "org.apache.spark.deploy.worker.Worker",
                    cluster.master_url,
                    "--host",
                    "127.0.0.1",
                    "--cores",
                    str(cores),
                    "--memory",
                    memory,
                    "--webui-port",
                    str(free_port()),
                    "--work-dir",
                    str(workdir / "work"),
                ],
            )
        try:
            cluster._wait_for_workers(workers, timeout_s=120)
        except BaseException:
            cluster.stop()
            raise
        return cluster

    def _spawn(self, name: str, command: list[str]) -> None:
        log = (self.workdir / f"{name}.log").open("wb")
        self.processes.append(
            subprocess.Popen(
                command,
                env=_bare_env(self.workdir),
                cwd=self.workdir,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        )
        log.close()

    def status(self) -> dict:
        """The master's own JSON status (workers, cores, applications)."""
        return httpx.get(f"{self.ui_url}/json/", timeout=5).json()

    def _wait_for_workers(self, workers: int, *, timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            for process in self.processes:
                if process.poll() is not None:
                    raise RuntimeError(f"a cluster process exited:\n{self.logs()}")
            try:
                if self.status().get("aliveworkers") == workers:
                    return
            except (httpx.TransportError, ValueError):
                pass  # the master's UI is not up yet
            time.sleep(0.5)
        raise RuntimeError(f"{workers} workers did not register in {timeout_s:g}s:\n{self.logs()}")

    def logs(self) -> str:
        return "\n".join(
            f"--- {path.name}\n{path.read_text(errors='replace')[-3000:]}"
            for path in sorted(self.workdir.glob("*.log"))
        )

    def submit(
        self,
        args: list[str],
        *,
        env: dict[str, str],
        timeout_s: float = 600,
        master: str | None = None,
    ) -> subprocess.CompletedProcess:
        """`spark-submit --master <this cluster> --deploy-mode client ARGS`, to its end;
        `master` another master instead (`local[1]`: a driver alone)."""
        return subprocess.run(
            self.submit_command(args, master=master),
            env=env,
            cwd=self.workdir,
            capture_output=True,
            text=True,
            timeout=timeout_s,
        )

    def submit_command(self, args: list[str], *, master: str | None = None) -> list[str]:
        spark_submit = str(spark_home() / "bin" / "spark-submit")
        return [
            spark_submit,
            "--master",
            master or self.master_url,
            "--deploy-mode",
            "client",
            *args,
        ]

    def worker_pids(self) -> list[int]:
        return [p.pid for p in self.processes[1:]]

    def executors(self, app_id: str | None = None) -> list[int]:
        """The pids of the executor processes the workers run now (of `app_id` only)."""
        workers = set(self.worker_pids())
        wanted = b"CoarseGrainedExecutorBackend"
        found = []
        for entry in Path("/proc").iterdir():
            if not entry.name.isdigit():
                continue
            try:
                stat = (entry / "stat").read_text()
                cmdline = (entry / "cmdline").read_bytes()
            except OSError:
                continue  # ended meanwhile
            parent = int(stat.rsplit(")", 1)[1].split()[1])
            if (
                parent in workers
                and wanted in cmdline
                and (app_id is None or app_id.encode() in cmdline.split(b"\0"))
            ):
                found.append(int(entry.name))
        return found

    def signal_executors(self, pids: list[int], sig: signal.Signals) -> None:
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):  # it ended already
                os.kill(pid, sig)

    def stop(self) -> None:
        """SIGTERM to workers (which end their executors), then to the master; SIGKILL after a
        grace. Leaves nothing running."""
        executors = self.executors()
        for process in reversed(self.processes):
            if process.poll() is None:
                process.terminate()
        for process in self.processes:
            try:
                process.wait(30)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(10)
        self.signal_executors([pid for pid in executors if _alive(pid)], signal.SIGKILL)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True
