"""The README's run command, short: the whole pipeline on embedded defaults checks itself."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = [pytest.mark.spark, pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[2]
KEYS = {
    "events_generated",
    "distinct_keys_generated",
    "bad_records",
    "rows_in_table",
    "batches",
    "failed_batches",
    "compactions",
    "failed_compactions",
    "data_files_before_last_compaction",
    "data_files_now",
    "max_ingest_wait_s",
    "warehouse",
    "table",
    "landing",
}


def test_short_demo_runs_the_pipeline_and_its_checks_pass(tmp_path):
    summary_path = tmp_path / "demo-summary.json"
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "demo",
            "--duration-s",
            "35",
            "--rate",
            "100",
            "--compact-every-s",
            "6",
            "--workdir",
            str(tmp_path / "work"),
            "--summary",
            str(summary_path),
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    summary = json.loads(summary_path.read_text())
    assert KEYS <= summary.keys()
    assert summary["checks"] == {"passed": True, "problems": []}
    assert summary["rows_in_table"] == summary["distinct_keys_generated"] > 0
    assert summary["bad_records"] > 0 and summary["failed_batches"] == 0
    assert summary["compactions"] >= 1 and summary["failed_compactions"] == 0
    assert "check passed" in done.stdout
    assert Path(summary["landing"]).is_dir() and Path(summary["warehouse"]).is_dir()


def _children(pid: int) -> set[int]:
    """Direct child processes of `pid` (Linux /proc)."""
    found: set[int] = set()
    for task in Path(f"/proc/{pid}/task").iterdir():
        found.update(int(c) for c in (task / "children").read_text().split())
    return found


def _alive(pid: int) -> bool:
    status = Path(f"/proc/{pid}/status")
    return status.exists() and "zombie" not in status.read_text()


def test_ctrl_c_stops_everything_the_demo_started(tmp_path):
    import signal
    import time

    import httpx

    demo = subprocess.Popen(
        [sys.executable, "-m", "demo", "--duration-s", "300", "--workdir", str(tmp_path / "w")],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        service_url, children = None, set()
        for line in demo.stdout:
            if line.startswith("lakelock service on "):
                service_url = line.split()[3]
            if "batches=" in line and "batches=0 " not in line:
                children = _children(demo.pid)  # the service and the Spark JVM
                break
        assert service_url and len(children) >= 2, "the pipeline should be running"
        demo.send_signal(signal.SIGINT)
        rest = demo.communicate(timeout=180)[0]
    finally:
        if demo.poll() is None:
            demo.kill()
    assert demo.returncode == 130, rest
    assert "everything started was stopped" in rest
    deadline = time.monotonic() + 10
    while any(_alive(pid) for pid in children) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not any(_alive(pid) for pid in children)
    with pytest.raises(httpx.TransportError):  # refused: the service is gone
        httpx.get(service_url + "/healthz", timeout=2)
