"""The service and curl recipes of docs/operating.md, where the README sends its readers for
them, work when pasted into bash in the order shown.

Each runs in a scratch folder (its `.venv` a link to this checkout's), on a free port instead of
8737, with curl told to fail on an error answer (`fail-with-body` in a curlrc of its own), so a
recipe that gets a 4xx fails the test instead of printing a problem and going on.
"""

import json
import os
import re
import signal
import subprocess
import time
from pathlib import Path

import httpx
import pytest

from testkit import free_port

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]
OPERATING = ROOT / "docs" / "operating.md"
TABLE = "local.db.events"
SERVICE = "2. Running the service"
CURL = "3. Operating it with curl"


def bash_blocks(section: str) -> list[str]:
    """The ```bash blocks of the docs/operating.md section headed `## {section}`, in order."""
    text = OPERATING.read_text()
    start = text.index(f"\n## {section}\n")
    end = text.find("\n## ", start + 1)
    body = text[start : end if end >= 0 else len(text)]
    return re.findall(r"```bash\n(.*?)```", body, flags=re.S)


@pytest.fixture
def scratch(tmp_path):
    """A folder to paste into, and the environment of a shell there: a free port, curl that fails
    on an error answer, nothing of LAKELOCK_* from this process."""
    (tmp_path / ".venv").symlink_to(ROOT / ".venv")
    (tmp_path / ".curlrc").write_text("fail-with-body\n")
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("LAKELOCK_")}
    # the recipes name no port: the service takes it from LAKELOCK_PORT, curl from the URL
    env.update(CURL_HOME=str(tmp_path), LAKELOCK_LOG_FORMAT="text", LAKELOCK_PORT=str(port))
    return tmp_path, port, env


def _on_port(script: str, port: int) -> str:
    return script.replace("127.0.0.1:8737", f"127.0.0.1:{port}").replace(
        "--port 8737", f"--port {port}"
    )


def _refused(port: int) -> bool:
    try:
        httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=2)
    except httpx.TransportError:
        return True
    return False


def test_the_curl_recipes_run_as_pasted(scratch):
    folder, port, env = scratch
    start, recipes, stop = bash_blocks(CURL)
    assert TABLE in recipes and "$OPS_TOKEN" in recipes and "OPS_TOKEN=" in start
    # what the recipes left, read between the page's last recipe and its stop line
    probe = (
        'curl -s "$LL/v1/tables/$T" -H "$AUTH" >state.json\n'
        'curl -s "$LL/v1/events?table=$T&limit=50" -H "$AUTH" >events.json\n'
    )
    script = "set -euo pipefail\n" + _on_port(start + recipes + probe + stop, port)
    done = subprocess.run(
        ["bash", "-c", script], cwd=folder, env=env, capture_output=True, text=True, timeout=120
    )
    log = (folder / "var" / "service.log").read_text() if (folder / "var").exists() else ""
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:] + log[-3000:]

    state = json.loads((folder / "state.json").read_text())
    assert state["switch"]["ingest"] == "running"
    assert state["switch"]["maintenance"] == "disabled"
    assert state["switch"]["backpressure"] == "disabled"
    assert state["maintenance_lease"] is None  # revoked
    events = [e["event"] for e in json.loads((folder / "events.json").read_text())["events"]]
    assert events.count("switch.set") == 4
    assert "lease.revoked" in events
    deadline = time.monotonic() + 30
    while not _refused(port) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert _refused(port), "the page's stop line should stop the service it started"


def _serve(line: str, folder: Path, env: dict[str, str]) -> subprocess.Popen[str]:
    return subprocess.Popen(
        ["bash", "-c", line],
        cwd=folder,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,  # the line's shell and the service stop together
    )


def _ready(url: str, process: subprocess.Popen[str], timeout_s: float = 60) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        assert process.poll() is None, process.communicate()[0][-3000:]
        try:
            if httpx.get(url + "/readyz", timeout=2).status_code == 200:
                return
        except httpx.TransportError:
            pass
        time.sleep(0.2)
    raise AssertionError(f"no answer from {url} within {timeout_s}s")


def _stop(process: subprocess.Popen[str]) -> None:
    if process.poll() is None:
        os.killpg(process.pid, signal.SIGTERM)
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()


def test_the_service_lines_start_a_service_as_described(scratch):
    folder, port, env = scratch
    local_try, with_tokens = bash_blocks(SERVICE)[0].strip().splitlines()
    assert "LAKELOCK_AUTH=off" in local_try and "LAKELOCK_TOKENS=" in with_tokens
    url = f"http://127.0.0.1:{port}"
    # the tokens are the ones the curl section exports, as the page says
    env = {**env, "OPS_TOKEN": "ops-secret-1", "JOB_TOKEN": "job-secret-1"}

    service = _serve(_on_port(local_try, port), folder, env)
    try:
        _ready(url, service)
        assert httpx.get(f"{url}/v1/events", params={"limit": 1}).status_code == 200
    finally:
        _stop(service)
    assert (folder / "var" / "lakelock.db").is_file()

    service = _serve(_on_port(with_tokens, port), folder, env)
    try:
        _ready(url, service)
        assert httpx.get(f"{url}/v1/events", params={"limit": 1}).status_code == 401
        ops = {"Authorization": "Bearer ops-secret-1"}
        assert httpx.get(f"{url}/v1/events", params={"limit": 1}, headers=ops).status_code == 200
    finally:
        _stop(service)


def test_the_service_refuses_to_start_with_auth_on_and_no_tokens(scratch):
    folder, _port, env = scratch
    done = subprocess.run(
        ["bash", "-c", ".venv/bin/python -m service"],
        cwd=folder,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2
    assert "LAKELOCK_TOKENS" in done.stderr


@pytest.mark.mariadb
def test_the_mysql_lines_migrate_then_serve(scratch):
    from sqlalchemy import create_engine, text
    from sqlalchemy.engine import make_url

    server = os.environ.get("LAKELOCK_TEST_MARIADB_URL")
    if not server:
        if os.environ.get("LAKELOCK_REQUIRE_MARIADB"):
            pytest.fail("LAKELOCK_REQUIRE_MARIADB is set but LAKELOCK_TEST_MARIADB_URL is not")
        pytest.skip("LAKELOCK_TEST_MARIADB_URL is not set")
    folder, port, env = scratch
    point, migrate, serve = bash_blocks(SERVICE)[1].strip().splitlines()
    assert point.startswith("export LAKELOCK_DATABASE_URL=") and migrate.endswith("migrate")
    assert "LAKELOCK_TOKENS" not in migrate, "a migration needs no tokens"
    name = f"lakelock_readme_{os.getpid()}"
    admin = create_engine(server)
    with admin.begin() as conn:
        conn.execute(text(f"CREATE DATABASE {name}"))  # empty: the page's migrate fills it
    try:
        url = make_url(server).set(database=name).render_as_string(hide_password=False)
        env = {**env, "LAKELOCK_DATABASE_URL": url, "OPS_TOKEN": "ops-secret-1"}
        env["JOB_TOKEN"] = "job-secret-1"
        # the page's lines after its first, which points at a database this test made
        env.pop("LAKELOCK_TOKENS", None)
        done = subprocess.run(
            ["bash", "-c", migrate],
            cwd=folder,
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert done.returncode == 0, done.stderr[-3000:]
        service = _serve(serve, folder, env)
        try:
            _ready(f"http://127.0.0.1:{port}", service)
            ops = {"Authorization": "Bearer ops-secret-1"}
            answer = httpx.get(f"http://127.0.0.1:{port}/v1/events", headers=ops)
            assert answer.status_code == 200
        finally:
            _stop(service)
    finally:
        with admin.begin() as conn:
            conn.execute(text(f"DROP DATABASE IF EXISTS {name}"))
        admin.dispose()
