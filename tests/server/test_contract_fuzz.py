"""openapi.json is the contract: schemathesis, with every check it has, finds no answer outside it.

A live service (a real process over SQLite, and MariaDB when configured) is fuzzed through its
own openapi.json with the operator's token: every status, content type, header and body must be
the declared one, no input may give a 5xx, bad input must be refused and good input accepted, and
each secured operation must refuse a call without or with a wrong token (`ignored_auth`).
The run is bounded by `MAX_EXAMPLES` per operation and phase: about 2,300 cases, about a minute
per database on 2 cores. It fuzzes with a fixed seed (tests/support/fuzzing.py), so the suite
fails only where the service or its contract changed; `bin/fuzz` explores with new seeds. Its
report (and the seed to repeat it with) is in a failure.

Every check runs but one, `use_after_free`: a released lease stays readable with its state.
The choices, each explained where it is made (tests/server/schemathesis.toml, and below): the
protocol's refusals of well-formed requests (410, 412, 423) count as accepted data, so does the
422 of a maintenance lease's release or renew without its token (JSON Schema cannot say which
leases need one), and the fuzzer runs one worker. With answers described in openapi.json the
fuzzer also follows links between calls (its stateful phase: acquire, then renew, release,
revoke that lease).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import httpx
import pytest

from tests.conftest import TOKENS, start_server
from tests.support.fuzzing import fuzz_seed, repeat_hint

pytestmark = [pytest.mark.slow, pytest.mark.dialect]

# bin/fuzz may ask for more (LAKELOCK_FUZZ_EXAMPLES)
MAX_EXAMPLES = int(os.environ.get("LAKELOCK_FUZZ_EXAMPLES", "30"))
# long-polls are part of the fuzzed surface; a short bound keeps a parked call from eating the
# run's time (the bound is in openapi.json, so the fuzzer keeps to it)
SERVICE_ENV = {"LAKELOCK_MAX_WAIT_S": "0.2"}
ST = Path(sys.executable).with_name("st")
CONFIG = Path(__file__).with_name("schemathesis.toml")


def _schemathesis(
    spec: str,
    report: Path,
    *args: str,
    config: Path = CONFIG,
    timeout: float = 600,
    seed: int | None = None,
    token: str = TOKENS["operator"],
) -> subprocess.CompletedProcess:
    return subprocess.run(
        [
            str(ST),
            *("--no-color", "--config-file", str(config)),
            "run",
            spec,
            *("--report", "json", "--report-json-path", str(report)),
            *("--header", f"Authorization: Bearer {token}"),
            # the same cases every run; no examples kept from earlier runs to replay
            *("--seed", str(fuzz_seed() if seed is None else seed)),
            *("--generation-database", "none"),
            # one worker: hypothesis describes its lambdas with ast.parse, which CPython before
            # 3.11.8 cannot run in two threads at once (gh-106905: "AST constructor recursion
            # depth mismatch" from the fuzzer itself)
            *("--request-timeout", "10", "--workers", "1"),
            *args,
        ],
        cwd=report.parent,  # its own state (.schemathesis/) stays out of the repository
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def test_every_answer_is_in_the_contract(db_url: str, tmp_path: Path) -> None:
    server = start_server(db_url, tmp_path, **SERVICE_ENV)
    try:
        # a live maintenance lease for the lease operations to work on: without one they could
        # only be asked about unknown ids (404)
        lease = httpx.post(
            f"{server.url}/v1/tables/lake.db.compacted/maintenance-lease",
            json={"holder": "fuzz-compactor", "ttl_s": 3600},
            headers=server.headers("job"),
        ).json()["lease_id"]
        config = tmp_path / "schemathesis.toml"
        config.write_text(CONFIG.read_text() + f'\n[parameters]\n"path.lease_id" = "{lease}"\n')
        seed = fuzz_seed()
        done = _schemathesis(
            server.url + "/openapi.json",
            tmp_path / "report.json",
            # every check but use_after_free (why: tests/server/schemathesis.toml); a check named on
            # the command line outranks the config file, so it is left out here
            *("--checks", "all", "--exclude-checks", "use_after_free"),
            *("--max-examples", str(MAX_EXAMPLES)),
            config=config,
            seed=seed,
        )
    finally:
        server.stop()
    report = json.loads((tmp_path / "report.json").read_text())
    summary = (
        repeat_hint(seed)
        + "\n"
        + json.dumps(
            {k: report[k] for k in ("seed", "operations", "test_cases", "failures", "errors")}
        )
    )
    assert done.returncode == 0, f"{summary}\n{done.stdout[:30000]}\n{done.stderr[-5000:]}"
    assert report["failures"] == [] and report["errors"] == [], summary
    assert report["operations"]["tested"] == report["operations"]["selected"] > 10, summary
    # what reached the service is in its log: nothing it did not expect
    assert "Traceback" not in server.log()


def test_the_fuzzer_catches_a_service_that_ignores_the_declared_bearer_scheme(
    tmp_path: Path,
) -> None:
    """The same contract (bearer scheme declared) served by a service running with auth off:
    `ignored_auth` must fail it, so a passing run above means the tokens are enforced."""
    from service.lock import migrate

    url = f"sqlite:///{tmp_path / 'lakelock.db'}"
    migrate.upgrade(url)
    server = start_server(url, tmp_path, **SERVICE_ENV)
    try:
        spec = tmp_path / "openapi.json"
        spec.write_text(httpx.get(server.url + "/openapi.json").text)
    finally:
        server.stop()
    open_server = start_server(url, tmp_path, LAKELOCK_AUTH="off", **SERVICE_ENV)
    try:
        assert httpx.get(open_server.url + "/v1/tables").status_code == 200
        done = _schemathesis(
            str(spec),
            tmp_path / "report.json",
            *("--url", open_server.url, "--checks", "ignored_auth", "--max-examples", "2"),
            *("--phases", "examples,fuzzing", "--mode", "positive"),
            *("--include-path", "/v1/tables", "--include-method", "GET"),
        )
    finally:
        open_server.stop()
    report = json.loads((tmp_path / "report.json").read_text())
    assert done.returncode != 0, done.stdout[-5000:]
    assert [f["type"] for f in report["failures"]] == ["IgnoredAuth"], report["failures"]
