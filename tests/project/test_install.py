"""One install per host: a wheel built from this checkout, each extra in a fresh virtualenv.

    base      the client alone (httpx, pydantic, tenacity): it takes a lease from a real service
    service   `lakelock-service` serves on SQLite (its migrations come inside the wheel)
    ops       `lakelock status` against that service
    spark     the jobs' entry points, and the Iceberg jar for spark-submit
    demo      `python -m demo` by counts, its checks and its audit passing

In each, every console script and `python -m` entry point answers `--help`, or says in one line
which extra to install (exit status 2); none of them starts Spark or needs a database for it.
Each venv must also lack what its host never imports (a Spark host has no FastAPI).

The venvs are made with uv from its cache (offline first; online, which fills the cache, only
when the cache lacks something), each once per module; nothing runs from this checkout: the
commands run in a temporary folder, so `python -m` imports the installed wheel.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import zipfile
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from testkit import LocalService

pytestmark = [pytest.mark.slow, pytest.mark.timeout(1500)]

ROOT = Path(__file__).resolve().parents[2]
UV = shutil.which("uv", path=str(Path(sys.executable).parent)) or shutil.which("uv")

SCRIPTS = (
    "lakelock",
    "lakelock-service",
    "lakelock-ingest",
    "lakelock-compactor",
    "lakelock-flink-writer",
)
MODULES = (
    "service",
    "service.ops.cli",
    "ingest_gate",
    "demo.generate",
    "compactor",
    "demo",
    "lakelock_submit",
)
# what --help does in each install: None = prints the usage, else the extra it names
NEEDS = {
    "base": {"lakelock": "ops", "service.ops.cli": "ops", "demo": "demo"},
    "service": {"lakelock": "ops", "service.ops.cli": "ops", "demo": "demo"},
    "ops": {"demo": "demo"},
    "spark": {"lakelock": "ops", "service.ops.cli": "ops", "demo": "demo"},
    "demo": {"lakelock": "ops", "service.ops.cli": "ops"},
}
# top-level modules each install must have, and must not have
HAS = {
    "base": (
        {"httpx", "pydantic", "tenacity"},
        {"fastapi", "sqlalchemy", "pyspark", "typer", "pyiceberg"},
    ),
    "service": (
        {
            "fastapi",
            "uvicorn",
            "sqlalchemy",
            "alembic",
            "pyiceberg",
        },  # pyiceberg: the catalog front
        {"pyspark", "typer", "pyarrow"},
    ),
    "ops": ({"typer", "rich", "pyiceberg"}, {"fastapi", "uvicorn", "alembic", "pyspark"}),
    "spark": ({"pyspark"}, {"fastapi", "uvicorn", "sqlalchemy", "alembic", "typer", "pyiceberg"}),
    "demo": ({"pyspark", "fastapi", "pyiceberg"}, {"typer"}),
}


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    if UV is None:
        pytest.fail("uv is not installed: bin/bootstrap installs it (the dev extra)")
    out = tmp_path_factory.mktemp("dist")
    subprocess.run(
        [UV, "build", "--wheel", "--out-dir", str(out), str(ROOT)],
        check=True,
        capture_output=True,
        timeout=600,
    )
    (built,) = out.glob("lakelock-*.whl")
    return built


def test_the_wheel_ships_the_packages_and_no_testing_support(wheel):
    """The testing support (testkit), the tests and the benchmarks live in the checkout only;
    the client's type information ships with it."""
    names = zipfile.ZipFile(wheel).namelist()
    assert not [n for n in names if n.startswith(("testkit/", "tests/", "benchmarks/"))]
    assert "service/py.typed" in names
    assert "service/server/app.py" in names and "demo/service.py" in names
    assert "ingest_gate/job/run.py" in names and "compactor/plan/planner.py" in names


class Venv:
    def __init__(self, path: Path, workdir: Path) -> None:
        self.path, self.workdir = path, workdir

    def bin(self, name: str) -> str:
        return str(self.path / "bin" / name)

    def env(self, **extra: str) -> dict[str, str]:
        keep = {k: v for k, v in os.environ.items() if not k.startswith(("LAKELOCK_", "PYTHON"))}
        keep.pop("VIRTUAL_ENV", None)
        path = f"{self.path / 'bin'}:/usr/bin:/bin"
        return {**keep, "PATH": path, "COLUMNS": "80", **extra}

    def run(self, *args: str, timeout: float = 120, **env: str) -> subprocess.CompletedProcess:
        return subprocess.run(
            list(args),
            cwd=self.workdir,
            env=self.env(**env),
            capture_output=True,
            text=True,
            timeout=timeout,
        )

    def modules(self, names: set[str]) -> set[str]:
        """Which of the top-level modules `names` this venv can import."""
        code = (
            "import importlib.util, json, sys; "
            "print(json.dumps([m for m in sys.argv[1:] if importlib.util.find_spec(m)]))"
        )
        done = self.run(self.bin("python"), "-c", code, *sorted(names))
        assert done.returncode == 0, done.stderr
        return set(json.loads(done.stdout))


def _install(venv: Path, requirement: str) -> None:
    python = str(venv / "bin" / "python")
    for offline in (True, False):
        done = subprocess.run(
            [UV, "pip", "install", "--quiet", "--python", python, requirement]
            + (["--offline"] if offline else []),
            capture_output=True,
            text=True,
            timeout=900,
        )
        if done.returncode == 0:
            return
    raise AssertionError(f"installing {requirement} failed:\n{done.stderr[-3000:]}")


@pytest.fixture(scope="module")
def venvs(wheel: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Venv]]:
    """One venv per install, each made at first use."""
    root = tmp_path_factory.mktemp("venvs")

    class Lazy(dict[str, Venv]):
        def __missing__(self, extra: str) -> Venv:
            path = root / extra
            subprocess.run(
                [UV, "venv", "--quiet", "--python", sys.executable, str(path)],
                check=True,
                capture_output=True,
                timeout=120,
            )
            suffix = "" if extra == "base" else f"[{extra}]"
            _install(path, f"lakelock{suffix} @ {wheel.as_uri()}")
            workdir = root / f"{extra}-work"
            workdir.mkdir()
            self[extra] = Venv(path, workdir)
            return self[extra]

    yield Lazy()


def _entry_points() -> list[tuple[str, ...]]:
    return [(name,) for name in SCRIPTS] + [("python", "-m", name) for name in MODULES]


@pytest.mark.parametrize("extra", list(NEEDS))
def test_each_entry_point_helps_or_names_its_extra_in_one_line(venvs, extra):
    venv = venvs[extra]
    for command in _entry_points():
        name = command[-1]
        done = venv.run(venv.bin(command[0]), *command[1:], "--help")
        needs = NEEDS[extra].get(name)
        shown = f"{' '.join(command)} --help in [{extra}]:\n{done.stdout}{done.stderr}"
        if needs is None:
            assert done.returncode == 0, shown
            assert "usage" in done.stdout.lower(), shown
            assert "Traceback" not in done.stderr, shown
        else:
            assert done.returncode == 2, shown
            assert done.stdout == "", shown
            (line,) = done.stderr.strip().splitlines()
            assert f"needs the {needs} extra" in line, shown
            assert f"pip install 'lakelock[{needs}]'" in line, shown


@pytest.mark.parametrize("extra", list(HAS))
def test_each_install_has_what_its_host_imports_and_nothing_else(venvs, extra):
    wanted, unwanted = HAS[extra]
    found = venvs[extra].modules(wanted | unwanted)
    assert found == wanted


@pytest.mark.parametrize(
    ("command", "extra"),
    [
        (("lakelock-ingest", "--max-batches", "1"), "spark"),
        (("lakelock-compactor", "plan", "--table", "local.db.events"), "spark"),
        (("lakelock-service", "migrate"), "service"),
        (("lakelock", "status"), "ops"),
    ],
    ids=["ingest", "compactor", "service", "lakelock"],
)
def test_running_a_command_of_another_host_says_which_extra(venvs, command, extra):
    venv = venvs["base"]
    done = venv.run(venv.bin(command[0]), *command[1:])
    assert done.returncode == 2
    (line,) = done.stderr.strip().splitlines()
    assert f"pip install 'lakelock[{extra}]'" in line


@pytest.fixture(scope="module")
def installed_service(venvs) -> Iterator[LocalService]:
    """`python -m service` of the service install on SQLite, run from a folder outside the
    checkout: its migrations come from the wheel."""
    venv = venvs["service"]
    service = LocalService.start(
        db_url=f"sqlite:///{venv.workdir / 'lakelock.db'}",
        log_path=venv.workdir / "service.log",
        python=venv.bin("python"),
        cwd=venv.workdir,
    )
    yield service
    service.stop()


def test_the_service_install_serves_and_the_base_client_takes_a_lease(venvs, installed_service):
    client = venvs["base"]
    code = (
        "import sys; from service.client import LeaseClient; "
        "c = LeaseClient(sys.argv[1], token=sys.argv[2]); "
        "print(c.acquire_commit('lake.db.events', holder='base-install', ttl_s=60).lease_id)"
    )
    done = client.run(
        client.bin("python"), "-c", code, installed_service.url, installed_service.token("job")
    )
    assert done.returncode == 0, done.stderr
    lease_id = done.stdout.strip()
    state = httpx.get(
        f"{installed_service.url}/v1/tables/lake.db.events",
        headers=installed_service.headers(),
    ).json()
    assert [lease["lease_id"] for lease in state["commit_leases"]] == [lease_id]


def test_the_ops_install_reads_status_in_80_columns(venvs, installed_service):
    ops = venvs["ops"]
    done = ops.run(
        ops.bin("lakelock"),
        "status",
        LAKELOCK_URL=installed_service.url,
        LAKELOCK_TOKEN=installed_service.token("operator"),
    )
    assert done.returncode == 0, done.stderr
    assert "lake.db.events" in done.stdout
    assert max(len(line.rstrip()) for line in done.stdout.splitlines()) <= 80


def test_the_spark_install_names_what_spark_submit_takes(venvs):
    spark = venvs["spark"]
    done = spark.run(spark.bin("python"), "-m", "lakelock_submit", "jars")
    assert done.returncode == 0, done.stderr
    jar = Path(done.stdout.strip())
    assert jar.name == "iceberg-spark-runtime-3.5_2.12-1.11.0.jar" and jar.is_file()
    # a cluster pinned to 1.9.2 gets the install's own jar, from the spark extra's wheel
    done = spark.run(
        spark.bin("python"), "-m", "lakelock_submit", "jars", LAKELOCK_ICEBERG_VERSION="1.9.2"
    )
    assert done.returncode == 0, done.stderr
    jar = Path(done.stdout.strip())
    assert jar.name == "iceberg-spark-runtime-3.5_2.12-1.9.2.jar" and jar.is_file()
    assert str(spark.path) in str(jar)  # the install's own, not this checkout's venv
    done = spark.run(
        spark.bin("python"), "-m", "lakelock_submit", "jars", LAKELOCK_ICEBERG_VERSION="1.10.0"
    )
    assert done.returncode != 0
    assert "LAKELOCK_ICEBERG_VERSION='1.10.0'" in done.stderr and "1.11.0 or 1.9.2" in done.stderr
    for job in ("ingest", "compactor"):
        script = Path(spark.run(spark.bin("python"), "-m", "lakelock_submit", job).stdout.strip())
        assert script.is_file() and str(spark.path) in str(script)
    done = spark.run(spark.bin("python"), "-m", "lakelock_submit", "py-files")
    assert done.returncode == 0, done.stderr
    names = zipfile.ZipFile(done.stdout.strip()).namelist()
    assert {"ingest_gate/job/decode.py", "jobkit/partition.py"} <= set(names)


@pytest.mark.spark
def test_the_demo_runs_with_its_extra_alone(venvs):
    """The README's demo from the `demo` install, by counts and short: every part of it starts
    from the wheel (the service and its migrations, Spark with the extra's Iceberg jar, the
    audit). tests/spark/test_demo.py runs it longer, through a compaction, from the checkout."""
    demo = venvs["demo"]
    done = demo.run(
        *(demo.bin("python"), "-m", "demo", "--events", "400", "--rate", "100"),
        *("--compactions", "0", "--timeout-s", "600"),
        timeout=900,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    summary = json.loads((demo.workdir / "demo-summary.json").read_text())
    assert summary["checks"] == {"passed": True, "problems": []}
    assert summary["events_generated"] == 400 and summary["rows_in_table"] > 0
    assert summary["audit"]["verdict"] == "clean"


CONSUMER = """
from service.client import LeaseClient


def take(client: LeaseClient) -> int:
    lease = client.acquire_commit("db.t", holder="h", ttl_s=30)
    return lease.lease_id
"""


def test_the_base_install_types_the_client_for_its_users(venvs, tmp_path):
    """py.typed ships: a strict type checker reads the client's and the wire models' types
    from the base install, so a user's mistake (a lease id is a str) is found."""
    consumer = tmp_path / "consumer.py"
    consumer.write_text(CONSUMER)
    checked = subprocess.run(
        [
            sys.executable,
            "-m",
            "mypy",
            "--strict",
            "--no-incremental",
            "--python-executable",
            venvs["base"].bin("python"),
            str(consumer),
        ],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert checked.returncode == 1, checked.stdout + checked.stderr
    assert 'Incompatible return value type (got "str", expected "int")' in checked.stdout
    assert "import-untyped" not in checked.stdout and "import-not-found" not in checked.stdout
