"""The README's run command, short: the whole pipeline on embedded defaults checks itself."""

import json
import os
import subprocess
from pathlib import Path

import pytest

from tests.support.helpers import installed, unactivated_env

# the demo runs by counts; these bounds only guard against a hang
pytestmark = [pytest.mark.spark, pytest.mark.slow, pytest.mark.timeout(1500)]

ROOT = Path(__file__).resolve().parents[2]
EVENTS = 1200
KEYS = {
    "events_generated",
    "distinct_keys_generated",
    "bad_records",
    "rows_in_table",
    "batches",
    "batches_merged",
    "bad_records_dead_lettered",
    "failed_batches",
    "compactor",
    "compactions",
    "follow_runs",
    "failed_compactions",
    "data_files_before_last_compaction",
    "data_files_now",
    "max_ingest_wait_s",
    "warehouse",
    "table",
    "landing",
}


def _run_demo(
    tmp_path: Path, *extra: str, events: int = EVENTS, compactions: int = 1
) -> tuple[subprocess.CompletedProcess[str], dict, Path]:
    """The demo by counts: 1,200 events in 12 landing files (so 12 micro-batches, enough small
    files for the demo's compaction thresholds), until one compaction succeeded. However slow
    the machine, the same things happen; the timeouts only guard against a hang."""
    workdir = tmp_path / "work"
    summary_path = tmp_path / "demo-summary.json"
    done = subprocess.run(
        [
            installed("python"),
            "-m",
            "demo",
            "--events",
            str(events),
            "--rate",
            "100",
            "--compactions",
            str(compactions),
            "--compact-every-s",
            "5",
            "--timeout-s",
            "900",
            "--workdir",
            str(workdir),
            "--summary",
            str(summary_path),
            *extra,
        ],
        cwd=tmp_path,
        env=unactivated_env(),
        capture_output=True,
        text=True,
        timeout=1200,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return done, json.loads(summary_path.read_text()), workdir


@pytest.fixture(scope="module")
def demo_run(tmp_path_factory):
    return _run_demo(tmp_path_factory.mktemp("demo"))


def test_short_demo_runs_the_pipeline_and_its_checks_pass(demo_run):
    done, summary, _ = demo_run
    assert summary.keys() >= KEYS
    assert summary["checks"] == {"passed": True, "problems": []}
    assert summary["events_generated"] == EVENTS
    assert summary["rows_in_table"] == summary["distinct_keys_generated"] > 0
    assert summary["bad_records"] > 0 and summary["failed_batches"] == 0
    assert summary["compactions"] >= 1 and summary["failed_compactions"] == 0
    # the compactor followed the stream: its compactions were of partitions the commits made due
    assert summary["compactor"] == "follow" and summary["follow_runs"] >= 1
    assert "followed dt=" in done.stdout
    assert "check passed" in done.stdout
    assert Path(summary["landing"]).is_dir() and Path(summary["warehouse"]).is_dir()


def test_the_debezium_demo_from_kafka_to_s3_on_the_timer_ends_in_the_generator_final_state(
    tmp_path,
):
    """`--source kafka --storage s3` (`bin/run --source kafka --storage s3`): the demo starts a
    broker and writes the change events into a topic of four partitions, keyed, and the table
    lies behind the service's catalog front on the project's S3 server, the query's checkpoints
    beside it; the check is the same: deleted keys gone, the rest exact, and the audit reads the
    table's history from S3. With `--compactor timer`, the compactor every --compact-every-s, as
    before it followed. One demo run for the three options, each of which the other demo runs
    leave at its default (the module's longest part)."""
    done, summary, workdir = _run_demo(
        tmp_path,
        *("--format", "debezium", "--source", "kafka", "--compactor", "timer"),
        *("--storage", "s3"),
        events=600,
    )
    assert summary["checks"] == {"passed": True, "problems": []}
    assert summary["topic"] == "events (4 partitions)" and "landing" not in summary
    # by counts, a produce's worth of messages per batch (about 100 of the 600 events'
    # messages), however late the stream starts: the small files the compaction waits for
    assert summary["batches"] >= 6
    assert summary["format"] == "debezium" and summary["deletes"] > 0
    assert summary["records_skipped"] > 0  # a tombstone after each delete
    assert summary["bad_records_dead_lettered"] == summary["bad_records"] > 0
    assert summary["rows_in_table"] == summary["distinct_keys_generated"] > 0
    assert "check passed" in done.stdout
    assert summary["compactor"] == "timer" and summary["follow_runs"] == 0
    assert summary["compactions"] >= 1 and summary["failed_compactions"] == 0
    assert "followed dt=" not in done.stdout
    assert summary["storage"] == "s3" and summary["table"] == "lakelock.db.events"
    assert summary["warehouse"].startswith("s3://lake/lakelock-demo/")
    assert summary["audit"]["verdict"] == "clean" and summary["audit"]["maintenance_commits"]
    assert "catalog front on s3://lake/lakelock-demo/" in done.stdout
    # what the run left is in the S3 server's folder, not in a local warehouse
    objects = workdir / "s3" / "data" / "lake" / "lakelock-demo"
    assert any(objects.rglob("*.parquet")) and any(objects.rglob("*.metadata.json"))
    assert not (workdir / "warehouse").exists() and not (workdir / "checkpoints").exists()


def _checkpoint_commits(workdir: Path) -> set[int]:
    commits = workdir / "checkpoints" / "ingest" / "commits"
    return {int(p.name) for p in commits.iterdir() if p.name.isdigit()}


def _snapshot_batch_ids(warehouse: Path, table: str) -> list[int]:
    """`lakelock.batch-id` of every snapshot, read from the table's metadata file (no Spark)."""
    _, namespace, name = table.split(".")
    metadata = warehouse / namespace / name / "metadata"
    version = (metadata / "version-hint.text").read_text().strip()
    current = json.loads((metadata / f"v{version}.metadata.json").read_text())
    return [
        int(s["summary"]["lakelock.batch-id"])
        for s in current["snapshots"]
        if "lakelock.batch-id" in s.get("summary", {})
    ]


def _dead_letter_lines(workdir: Path) -> int:
    return sum(
        len(path.read_text().splitlines())
        for path in (workdir / "dead-letter").rglob("part-*")
        if not path.name.endswith(".crc")
    )


def test_demo_summary_counts_match_what_is_on_disk(demo_run):
    _, summary, workdir = demo_run
    commits = _checkpoint_commits(workdir)
    snapshot_ids = _snapshot_batch_ids(Path(summary["warehouse"]), summary["table"])
    assert summary["batches"] == len(commits) == max(commits) + 1
    # one landing file per batch when run by counts
    assert summary["batches"] == EVENTS // 100
    assert len(snapshot_ids) == len(set(snapshot_ids)), "a batch committed twice"
    assert summary["batches_merged"] == len(snapshot_ids)
    # the demo's key holds its partition columns: every merged batch leased its partitions only
    assert summary["lease_scope"] == "partitions"
    assert summary["batches_scoped"] == summary["batches_merged"]
    assert set(snapshot_ids) <= commits
    assert summary["bad_records_dead_lettered"] == _dead_letter_lines(workdir)
    assert summary["bad_records_dead_lettered"] == summary["bad_records"]


def test_demo_prints_how_to_look_at_what_it_left(demo_run):
    done, summary, workdir = demo_run
    assert (
        f"python -m compactor plan --table {summary['table']} --warehouse {workdir / 'warehouse'}"
        in done.stdout
    )
    assert f"LAKELOCK_DATABASE_URL=sqlite:///{workdir / 'lakelock.db'}" in done.stdout
    assert (workdir / "lakelock.db").is_file()


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
        [
            installed("python"),
            "-m",
            "demo",
            "--duration-s",
            "300",
            "--workdir",
            str(tmp_path / "w"),
        ],
        cwd=tmp_path,
        env=unactivated_env(),
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
    deadline = time.monotonic() + 60  # a guard against a hang only
    while any(_alive(pid) for pid in children) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not any(_alive(pid) for pid in children)
    with pytest.raises(httpx.TransportError):  # refused: the service is gone
        httpx.get(service_url + "/healthz", timeout=2)


def test_the_printed_plan_command_reads_the_demo_table(demo_run):
    done, summary, _ = demo_run
    line = next(x.strip() for x in done.stdout.splitlines() if "-m compactor plan" in x)
    plan = subprocess.run(
        ["bash", "-c", line], cwd=ROOT, capture_output=True, text=True, timeout=300
    )
    assert plan.returncode == 0, plan.stdout[-2000:] + plan.stderr[-2000:]
    assert summary["table"] in plan.stdout


def test_plan_of_a_missing_table_says_in_one_line_where_it_looked(tmp_path):
    warehouse = tmp_path / "warehouse"
    plan = subprocess.run(
        [
            installed("lakelock-compactor"),
            "plan",
            "--table",
            "local.db.nosuch",
            "--warehouse",
            str(warehouse),
        ],
        cwd=tmp_path,
        env=unactivated_env(),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert plan.returncode == 1, plan.stdout[-2000:] + plan.stderr[-2000:]
    assert "Traceback" not in plan.stderr and "AnalysisException" not in plan.stderr
    [line] = plan.stdout.splitlines()
    assert "local.db.nosuch" in line and "catalog 'local'" in line
    assert str(warehouse) in line and "--warehouse" in line


def test_the_printed_service_commands_show_the_demo_table_with_curl(demo_run, tmp_path):
    from testkit import free_port

    done, summary, _ = demo_run
    lines = done.stdout.split("look at what the run left in", 1)[1].split("\n\n")[0].splitlines()
    commands = [x.strip() for x in lines[1:] if x.strip() and "-m compactor plan" not in x]
    port = free_port()
    (tmp_path / ".curlrc").write_text("fail-with-body\n")  # an error answer fails the script
    script = "\n".join(["set -euo pipefail", *commands, "kill %1"])
    shown = subprocess.run(
        ["bash", "-c", script.replace("127.0.0.1:8737", f"127.0.0.1:{port}")],
        cwd=ROOT,
        env={**os.environ, "LAKELOCK_PORT": str(port), "CURL_HOME": str(tmp_path)},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert shown.returncode == 0, shown.stdout[-2000:] + shown.stderr[-2000:]
    answers = [json.loads(x) for x in shown.stdout.splitlines() if x.startswith("{")]
    state, events = answers[-2], answers[-1]
    assert state["table"] == summary["table"] and state["version"] > 0
    assert any(e["event"] == "run.reported" for e in events["events"])
