"""Both jobs say which variable holds their token when the service refuses it (401)."""

import logging

import pytest

import compactor.fleet
import compactor.job
from compactor.config import TableConfig
from compactor.rank import Summary
from jobkit.token import TOKEN_ENV, refused_token


@pytest.mark.parametrize(
    ("token", "state"),
    [(None, "LAKELOCK_TOKEN is not set"), ("s3cret-xx", "does not know")],
)
def test_a_refused_token_names_the_variable_and_how_to_fix_it(token, state):
    line = refused_token(TOKEN_ENV, token=token)
    assert state in line and "LAKELOCK_TOKENS" in line and "LAKELOCK_AUTH=off" in line
    assert "s3cret" not in line  # never the secret itself


def _refused_claim(client, table, **_):
    from service.wire.errors import Unauthorized

    raise Unauthorized("send Authorization: Bearer <secret> with a configured token")


def test_compactor_run_once_without_a_token_names_lakelock_token(monkeypatch, caplog):
    monkeypatch.delenv(TOKEN_ENV, raising=False)
    # a table with debt by its summary, then the service refuses the claim (401)
    monkeypatch.setattr(compactor.fleet, "spark_jobs", lambda spark: 0)
    monkeypatch.setattr(
        compactor.fleet,
        "read_summary",
        lambda spark, table: Summary(table, snapshot_id=1, data_files=1, delete_files=1),
    )
    monkeypatch.setattr(compactor.fleet, "take", _refused_claim)
    with caplog.at_level(logging.ERROR, logger="compactor"):
        status = compactor.job.run_once(
            None, client=None, tables=[TableConfig(name="local.db.events")]
        )
    assert status == 1
    assert "LAKELOCK_TOKEN is not set" in caplog.text


class _RefusedRun:
    """An ingest query whose first batch the service refused (what handle.wait() raises)."""

    query_id = "q-1"

    def summary(self):
        return {"records": 0}

    def wait(self):
        from service.wire.errors import Unauthorized

        raise Unauthorized("send Authorization: Bearer <secret> with a configured token")


def test_ingest_job_without_a_token_names_lakelock_token(monkeypatch, caplog):
    import ingest_gate.__main__
    import ingest_gate.job.run

    monkeypatch.delenv(TOKEN_ENV, raising=False)
    monkeypatch.setattr(ingest_gate.job.run, "run", lambda config: _RefusedRun())
    with caplog.at_level(logging.WARNING, logger="ingest_gate"):
        status = ingest_gate.__main__.main([])
    assert status == 1
    [error] = [r for r in caplog.records if r.levelno == logging.ERROR]
    assert "LAKELOCK_TOKEN is not set" in error.getMessage() and error.exc_info is None
