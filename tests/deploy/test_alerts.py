"""The alerting rules in deploy/prometheus: valid, their own unit tests pass (promtool), and
every metric they read is one the service exports."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from tests.lock.due_rows import compact, due, forget_counts, write
from tests.support.helpers import claim, commit

RULES = Path(__file__).resolve().parents[2] / "deploy" / "prometheus"
TABLE = "lake.db.events"


def _promtool() -> str:
    tool = os.environ.get("LAKELOCK_PROMTOOL") or shutil.which("promtool")
    if tool:
        return tool
    if os.environ.get("CI"):
        pytest.fail("no promtool in CI: bin/test takes it from Debian's prometheus package")
    pytest.skip("no promtool (bin/promtool fetches one; bin/test does it)")


@pytest.mark.parametrize(
    "command", [["check", "rules", "alerts.yml"], ["test", "rules", "alerts.test.yml"]]
)
def test_promtool_checks_the_rules_and_runs_their_tests(command):
    done = subprocess.run(
        [_promtool(), *command], cwd=RULES, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stdout + done.stderr


def _metrics_read_by_the_rules() -> set[str]:
    rules = yaml.safe_load((RULES / "alerts.yml").read_text())
    names: set[str] = set()
    for group in rules["groups"]:
        for rule in group["rules"]:
            names |= set(re.findall(r"\blakelock_[a-z_]+", rule["expr"]))
    return names


def test_every_metric_the_rules_read_is_exported(api, db_url):
    # a state in which every series exists: a debt report, a backpressure, leases of each kind
    api.put(
        f"/v1/tables/{TABLE}/debt",
        json={
            "data_files": 40,
            "small_files": 30,
            "delete_files": 26,
            "partitions_over_target": 3,
            "partitions_over_bound": 1,
            "worst_partition": 31,
        },
    ).raise_for_status()
    held = claim(api).json()
    api.post(
        f"/v1/tables/{TABLE}/backpressure",
        json={
            "claim_id": held["lease_id"],
            "holder": "compactor-1",
            "partitions": ["dt=2024-06-20"],
            "reason": "26 delete files (bound 24)",
        },
    ).raise_for_status()
    lease = api.post(
        f"/v1/tables/{TABLE}/maintenance-lease",
        json={"holder": "compactor-1", "ttl_s": 60, "partitions": ["dt=2024-06-21"]},
    ).json()
    api.delete(
        f"/v1/leases/{lease['lease_id']}", params={"holder": "compactor-1", "token": lease["token"]}
    ).raise_for_status()
    commit(api, partitions=["dt=2024-06-21"]).raise_for_status()
    api.post(
        f"/v1/tables/{TABLE}/maintenance-lease",
        json={"holder": "compactor-1", "ttl_s": 60, "partitions": ["dt=2024-06-22"]},
    ).raise_for_status()  # live at the scrape
    # partitions due as commits land: one compacted, one due still, a compactor following
    forget_counts(db_url)
    write(api, {"dt=2024-06-23": (4, 0), "dt=2024-06-24": (0, 4)})
    compact(api, ["dt=2024-06-23"]).raise_for_status()
    due(api).raise_for_status()
    text = api.get("/metrics").text
    forget_counts(db_url)
    exported = set(re.findall(r"^(lakelock_[a-z_]+)", text, flags=re.MULTILINE))
    read = _metrics_read_by_the_rules()
    assert read == {
        "lakelock_table_partitions_over_bound",
        "lakelock_due_to_compacted_seconds",
        "lakelock_due_oldest_seconds",
        "lakelock_due_followers",
        "lakelock_backpressure_partitions",
        "lakelock_maintenance_lease_seconds",
        "lakelock_lease_hold_seconds_bucket",
    }
    assert read <= exported, sorted(read - exported)
    assert f'lakelock_backpressure_partitions{{table="{TABLE}"}} 1.0' in text
    assert f'lakelock_table_partitions_over_bound{{table="{TABLE}"}} 1.0' in text
    assert re.search(rf'^lakelock_maintenance_lease_seconds{{table="{TABLE}"}} \d', text, re.M)
    p95 = rf'^lakelock_due_to_compacted_seconds{{quantile="0.95",table="{TABLE}"}} \d'
    assert re.search(p95, text, re.M)
    assert re.search(rf'^lakelock_due_oldest_seconds{{table="{TABLE}"}} \d', text, re.M)
    assert f'lakelock_due_followers{{table="{TABLE}"}} 1.0' in text
