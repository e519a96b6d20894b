"""bin/lint, the lint .ci/run makes, reads what the repository tracks only: a developer who ran
bin/run (which leaves Avro, Parquet and logs in var/) and then .ci/run is not failed by them."""

import shutil
import subprocess
import uuid
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow  # all of bin/lint, mypy strict too

ROOT = Path(__file__).resolve().parents[2]
WORD = "aggr" + "esive"  # misspelled, and never so in a tracked file (this one is linted)
MISSPELLED = f"an {WORD} log line, as a server's log may say\n"


def test_lint_passes_beside_what_runs_leave_in_var():
    folder = ROOT / "var" / f"lint-{uuid.uuid4().hex[:8]}"  # ignored (.gitignore: /var/)
    folder.mkdir(parents=True)
    try:
        (folder / "server.log").write_text(MISSPELLED)
        (folder / "left.py").write_text("import os\nx=1\n")  # unused import, unformatted
        # read, the file would fail codespell: it is there to be ignored
        found = subprocess.run(
            [str(ROOT / ".venv/bin/codespell"), str(folder)], capture_output=True, text=True
        )
        assert f"{WORD} ==> aggressive" in found.stdout, found
        linted = subprocess.run(
            [str(ROOT / "bin/lint")], cwd=ROOT, capture_output=True, text=True, timeout=600
        )
        assert linted.returncode == 0, linted.stdout[-3000:] + linted.stderr[-3000:]
    finally:
        shutil.rmtree(folder)
