"""What spark-submit takes from lakelock_submit: the executors' Python travels as one zip, and a
Python with nothing installed runs the ingest job's decoder from it, as an executor does."""

from __future__ import annotations

import json
import pickle
import subprocess
import sys
import zipfile

from ingest_gate.job.decode import Decoder
from lakelock_submit import py_files
from lakelock_submit.__main__ import main
from tests.jobs.test_decode import MEMBERS

# an executor's task, in a Python with the standard library and the zip only: unpickle the
# decoder the driver sent and decode records with it
EXECUTOR = """
import json, pickle, sys
sys.path.insert(0, sys.argv[1])
decoder = pickle.loads(sys.stdin.buffer.read())
records = [(line, "changes-0001.json", n) for n, line in enumerate(json.loads(sys.argv[2]))]
rows = list(decoder.rows(records))
assert not [m for m in sys.modules if m.split(".")[0] in ("pyspark", "pydantic", "httpx")]
print(json.dumps([[str(v) for v in row] for row in rows]))
"""


def test_a_python_with_nothing_installed_decodes_with_the_zip_alone(tmp_path):
    archive = py_files(tmp_path)
    assert "ingest_gate/job/decode.py" in zipfile.ZipFile(archive).namelist()
    decoder = Decoder(MEMBERS, key_columns=("userid",), format="debezium")
    records = [
        json.dumps({"op": "c", "after": {"userid": "u1", "name": "Ann", "member_level": 2}}),
        json.dumps({"op": "d", "before": {"userid": "u2"}}),
        "not json",
    ]
    done = subprocess.run(
        # -I: no site-packages, no working folder on sys.path, no PYTHON* variables
        [sys.executable, "-I", "-c", EXECUTOR, str(archive), json.dumps(records)],
        input=pickle.dumps(decoder),
        capture_output=True,
        cwd=tmp_path,
        check=False,
    )
    assert done.returncode == 0, done.stderr.decode()
    rows = json.loads(done.stdout)
    assert [row[:4] for row in rows] == [
        ["change", "None", "None", "False"],
        ["change", "None", "None", "True"],
        ["bad", "unparseable JSON: not a JSON object", "not json", "None"],
    ]
    assert "Ann" in rows[0] and "u2" in rows[1]


def test_the_zip_is_made_once_per_version_and_its_path_printed(tmp_path, capsys, monkeypatch):
    first = py_files(tmp_path)
    assert py_files(tmp_path) == first
    assert [p.name for p in tmp_path.iterdir()] == [first.name]
    monkeypatch.setattr("tempfile.tempdir", str(tmp_path))
    assert main(["py-files"]) == 0
    printed = capsys.readouterr().out.strip()
    assert printed.endswith(first.name) and zipfile.is_zipfile(printed)
