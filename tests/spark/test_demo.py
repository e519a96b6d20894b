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
