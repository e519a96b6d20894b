import pytest

from tests.conftest import auth

pytestmark = pytest.mark.dialect  # on SQLite and MariaDB (tests/conftest.py)


def _report(api, outcome, **extra):
    return api.post(
        "/v1/tables/lake.db.events/runs",
        json={"outcome": outcome, "holder": "compactor-1", **extra},
        headers=auth("job"),
    )


def test_run_reports_are_kept_and_served_newest_first(api):
    assert _report(api, "compacted", data_files_before=40, data_files_after=2).status_code == 201
    assert _report(api, "skipped", reason="healthy").status_code == 201
    runs = api.get("/v1/tables/lake.db.events/runs", headers=auth("reader")).json()["runs"]
    assert [r["outcome"] for r in runs] == ["skipped", "compacted"]
    assert runs[1]["data_files_before"] == 40


def test_only_the_last_runs_per_table_are_kept(db_url):
    from starlette.testclient import TestClient

    from service.server.app import create_app
    from tests.conftest import make_settings

    with TestClient(create_app(make_settings(db_url, runs_kept=3)), headers=auth("job")) as api:
        for number in range(5):
            _report(api, "compacted", number=number)
        _report_other = api.post("/v1/tables/db.other/runs", json={"outcome": "failed"})
        assert _report_other.status_code == 201
        answer = api.get("/v1/tables/lake.db.events/runs").json()
        assert [r["number"] for r in answer["runs"]] == [4, 3, 2]
        assert answer["kept"] == 3  # the status page says its history reaches no further
        assert len(api.get("/v1/tables/db.other/runs").json()["runs"]) == 1


def test_run_report_needs_an_outcome(api):
    response = api.post("/v1/tables/lake.db.events/runs", json={"holder": "x"})
    assert response.status_code == 422
    assert "outcome" in response.json()["detail"]
