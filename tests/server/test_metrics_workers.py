"""With LAKELOCK_WORKERS=2, whichever worker answers a scrape reports the sum over both."""

from __future__ import annotations

import json
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import pytest
from prometheus_client.mmap_dict import MmapedDict, mmap_key
from prometheus_client.parser import text_string_to_metric_families

from tests.conftest import ServerProcess, auth, start_server
from tests.support.helpers import HANG_GUARD_S

pytestmark = pytest.mark.slow

GRANTS = ("lakelock_grants_total", (("kind", "commit"), ("scope", "table")))
LIVE = ("lakelock_live_leases", (("kind", "commit"),))


def _grant(server: ServerProcess, number: int) -> None:
    # a new connection per request, so the kernel hands them to either worker
    response = httpx.post(
        f"{server.url}/v1/tables/lake.db.t{number % 4}/commit-leases",
        json={"holder": f"ingest-{number}", "ttl_s": 600},
        headers=auth("job"),
        timeout=30,
    )
    assert response.status_code == 201, response.text


def _grants_per_process(folder: Path) -> dict[str, float]:
    """Commit grants each worker counted, from its own file in the multiprocess folder."""
    found = {}
    for path in folder.glob("counter_*.db"):
        for key, value, _timestamp, _pos in MmapedDict.read_all_values_from_file(str(path)):
            _family, name, labels, _help = json.loads(key)
            if name == "lakelock_grants_total" and labels == {"kind": "commit", "scope": "table"}:
                found[path.name] = value
    return found


def _scrape(server: ServerProcess) -> dict:
    text = httpx.get(f"{server.url}/metrics", headers=auth("reader"), timeout=30).text
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def test_counters_are_summed_over_workers(db_url: str, tmp_path: Path):
    folder = tmp_path / "metrics"
    folder.mkdir()
    # a dead run's file: it must be cleared at start, not counted
    stale = MmapedDict(str(folder / "counter_999999.db"))
    stale.write_value(
        mmap_key(
            "lakelock_grants", "lakelock_grants_total", ("kind", "scope"), ("commit", "table"), "x"
        ),
        1000,
        0,
    )
    stale.close()

    server = start_server(
        db_url, tmp_path, LAKELOCK_WORKERS="2", PROMETHEUS_MULTIPROC_DIR=str(folder)
    )
    try:
        sent, deadline = 0, time.monotonic() + HANG_GUARD_S
        with ThreadPoolExecutor(8) as pool:
            # until both workers have granted some: a second worker still starting on a busy
            # machine leaves the first every request for a while (the bound only guards a hang)
            while sum(1 for n in _grants_per_process(folder).values() if n > 0) < 2:
                assert time.monotonic() < deadline, (
                    f"one worker took every request: {_grants_per_process(folder)}"
                )
                list(pool.map(lambda n: _grant(server, n), range(sent, sent + 20)))
                sent += 20
        assert sum(_grants_per_process(folder).values()) == sent
        for _ in range(6):  # each scrape may reach either worker
            samples = _scrape(server)
            assert samples[GRANTS] == sent
            assert samples[LIVE] == sent
    finally:
        assert server.stop() == 0, server.log()
    assert not (folder / "counter_999999.db").exists()
