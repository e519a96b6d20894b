"""The image's command, environment and health check, run the way the container runs them.

No Docker engine here: the test lays out what the Dockerfile copies into /app (service/,
migrations/) in a temporary folder, puts this virtualenv where the image has /opt/venv, and runs
the Dockerfile's CMD and HEALTHCHECK with the Dockerfile's ENV, then the migration task's command.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from sqlalchemy import create_engine

from service.lock import migrate
from tests.conftest import TOKENS_ENV, free_port
from tests.support.dockerfile import ROOT, Image, container, task_definition

pytestmark = pytest.mark.slow

IMAGE = Image.read(ROOT / "Dockerfile")
VENV_BIN = str(Path(sys.executable).parent)


@pytest.fixture
def app_dir(tmp_path: Path) -> Path:
    """What the image has in /app: the paths the Dockerfile copies, minus deploy/ files."""
    app = tmp_path / "app"
    app.mkdir()
    for path in IMAGE.copied_paths():
        if path.startswith("deploy/"):
            continue
        if (ROOT / path).is_file():
            (app / path).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(ROOT / path, app / path)
        else:
            shutil.copytree(ROOT / path, app / path, ignore=shutil.ignore_patterns("__pycache__"))
    return app


def _image_env(**overrides: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("LAKELOCK_", "PYTHON"))}
    for key, value in IMAGE.env.items():
        env[key] = value.replace("/opt/venv/bin", VENV_BIN).replace("$PATH", os.environ["PATH"])
    env.update(overrides)
    return env


def _healthcheck(env: dict[str, str], cwd: Path) -> int:
    return subprocess.run(IMAGE.healthcheck, env=env, cwd=cwd, timeout=30).returncode


@pytest.fixture
def running(app_dir: Path) -> Iterator[tuple[subprocess.Popen, dict[str, str], Path]]:
    """The image's CMD on its defaults: SQLite under /app/var, auth on."""
    env = _image_env(LAKELOCK_PORT=str(free_port()), LAKELOCK_TOKENS=TOKENS_ENV)
    log = (app_dir.parent / "service.log").open("wb")
    process = subprocess.Popen(IMAGE.cmd, env=env, cwd=app_dir, stdout=log, stderr=log)
    url = f"http://127.0.0.1:{env['LAKELOCK_PORT']}"
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and process.poll() is None:
        try:
            if httpx.get(url + "/readyz", timeout=1).status_code == 200:
                break
        except httpx.TransportError:
            time.sleep(0.1)
    yield process, env, app_dir
    if process.poll() is None:
        process.kill()
        process.wait(10)


def test_the_image_command_serves_on_its_defaults_and_passes_its_health_check(running):
    process, env, app_dir = running
    url = f"http://127.0.0.1:{env['LAKELOCK_PORT']}"
    assert process.poll() is None, (app_dir.parent / "service.log").read_text()
    assert httpx.get(url + "/readyz", timeout=5).json()["status"] == "ready"
    assert (app_dir / "var" / "lakelock.db").exists(), "a fresh SQLite file, migrated on start"
    assert _healthcheck(env, app_dir) == 0

    process.send_signal(signal.SIGTERM)
    assert process.wait(30) == 0
    assert _healthcheck(env, app_dir) != 0, "a stopped service must fail the health check"
    for line in (app_dir.parent / "service.log").read_text().splitlines():
        json.loads(line)  # LAKELOCK_LOG_FORMAT=json from the image


def test_the_migration_task_brings_a_fresh_database_to_the_head(app_dir: Path, tmp_path: Path):
    spec = container(task_definition("migrate-task-definition.json"))
    url = f"sqlite:///{tmp_path / 'fresh.db'}"
    env = _image_env(
        **{e["name"]: e["value"] for e in spec["environment"]}, LAKELOCK_DATABASE_URL=url
    )
    done = subprocess.run(
        spec["command"], env=env, cwd=app_dir, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    engine = create_engine(url)
    assert migrate.is_at_head(engine)
    engine.dispose()


def test_a_migration_that_cannot_reach_the_database_fails_the_task_without_the_password(
    app_dir: Path,
):
    spec = container(task_definition("migrate-task-definition.json"))
    env = _image_env(
        **{e["name"]: e["value"] for e in spec["environment"]}
        | {
            "LAKELOCK_DATABASE_URL": f"mysql+pymysql://lock:pw-unseen-7@127.0.0.1:{free_port()}/x",
            "LAKELOCK_DB_TIMEOUT_S": "1",
        }
    )
    done = subprocess.run(
        spec["command"], env=env, cwd=app_dir, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 1
    lines = [json.loads(line) for line in done.stderr.splitlines()]
    assert any(line["msg"] == "migration failed" and "exc" in line for line in lines)
    assert "pw-unseen-7" not in done.stderr
