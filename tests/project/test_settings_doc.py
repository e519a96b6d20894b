"""docs/settings.md lists every setting, and `python -m service` refuses bad ones at start."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from service.server.settings import Settings, settings_table
from tests.support.dockerfile import ROOT

DOC = ROOT / "docs" / "settings.md"
BEGIN = "<!-- settings-table"
END = "<!-- /settings-table -->"


def _documented_table() -> str:
    text = DOC.read_text()
    start = text.index("-->", text.index(BEGIN)) + len("-->\n")
    return text[start : text.index(END)]


def test_the_settings_table_is_the_one_the_code_generates():
    assert _documented_table() == settings_table(), (
        "the settings table of docs/settings.md is stale; regenerate it with "
        "service.server.settings.settings_table()"
    )


def test_every_setting_says_what_it_means():
    for name, field in Settings.model_fields.items():
        assert field.description and len(field.description) > 10, name
        assert f"`LAKELOCK_{name.upper()}`" in _documented_table()


@pytest.mark.parametrize(
    ("variable", "value", "message"),
    [
        ("LAKELOCK_PORT", "70000", "LAKELOCK_PORT: Input should be less than or equal to 65535"),
        ("LAKELOCK_PORT", "http", "LAKELOCK_PORT: Input should be a valid integer"),
        ("LAKELOCK_WORKERS", "0", "LAKELOCK_WORKERS: Input should be greater than or equal to 1"),
        ("LAKELOCK_DATABASE_URL", "postgresql://u:pw-9@db/x", "LAKELOCK_DATABASE_URL: must start"),
        ("LAKELOCK_LOG_LEVEL", "loud", "LAKELOCK_LOG_LEVEL: Input should be"),
        (
            "LAKELOCK_METRICS_MAX_TABLES",
            "-1",
            "LAKELOCK_METRICS_MAX_TABLES: Input should be greater than or equal to 0",
        ),
    ],
)
def test_the_service_refuses_to_start_on_a_bad_value_and_names_the_variable(
    variable, value, message, tmp_path
):
    env = {key: val for key, val in os.environ.items() if not key.startswith("LAKELOCK_")} | {
        "LAKELOCK_AUTH": "off",
        "LAKELOCK_DATABASE_URL": f"sqlite:///{tmp_path}/x.db",
    }
    env[variable] = value
    done = subprocess.run(
        [sys.executable, "-m", "service"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2, done.stderr
    assert message in done.stderr
    assert "pw-9" not in done.stderr
    assert not (tmp_path / "x.db").exists(), "nothing may start before the settings are valid"
