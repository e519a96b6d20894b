"""Where the suite's time goes (a pytest plugin, loaded by tests/conftest.py): each test
module's seconds, its tests' setup, call and teardown summed, printed at the end of a run
slowest first, written to var/test-durations-<tier>.json (one file per tier, so that CI's bench
run keeps the full run's figures), and each module over its budget named.

A budget is a figure to keep the suite in check, never a test's verdict: a busy machine makes
every module slower, so an overrun is printed, and the run's outcome stays its tests'. A
module's budget is its `BUDGET_S` when it sets one, else BUDGET_S below; the run's is
SUITE_BUDGET_S of its tier (the full run's is the goal it does not meet yet, so it says by how
much).
"""

from __future__ import annotations

import json
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

import pytest

from tests.support.tier import FAST_MARKS, TIER

BUDGET_S = {"fast": 30.0, "slow": 180.0}
"""A module's budget unless it says otherwise: `slow` for one whose tests are marked slow or
spark, `fast` for the others."""
SUITE_BUDGET_S = {"fast": 3 * 60.0, "full": 20 * 60.0}
"""A run on a 2-core machine: `bin/test --fast`, and the whole of `bin/test`."""
SHOWN = 15
"""The modules listed at the end of a run, slowest first."""

_seconds: dict[str, float] = defaultdict(float)
_budgets: dict[str, float] = {}
_started = time.monotonic()


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Each test carries its module's budget in its reports (which reach the controller of
    bin/test --fast's workers, where the items do not)."""
    for item in items:
        own = getattr(getattr(item, "module", None), "BUDGET_S", None)
        slow = item.get_closest_marker("slow") or item.get_closest_marker("spark")
        budget = float(own) if own is not None else BUDGET_S["slow" if slow else "fast"]
        item.user_properties.append(("budget_s", budget))


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    module = report.nodeid.split("::", 1)[0]
    _seconds[module] += report.duration
    for name, value in report.user_properties:
        if name == "budget_s":
            _budgets[module] = max(_budgets.get(module, 0.0), float(value))


TIER_MARKS = {"fast": FAST_MARKS, "full": "not bench", "bench": "bench"}
"""The mark expression of each tier's whole run: bin/test --fast's, pyproject's addopts (every
test but the benchmarks' small runs), and bin/test -m bench."""


def _file_tier(config: pytest.Config) -> str:
    """`fast`, `full` or `bench` (bin/test -m bench) for a whole tier's run; `<tier>-selection`
    for a run of chosen tests (paths, -k, another -m, --deselect, --lf), which leaves the whole
    run's figures be."""
    marks = config.getoption("markexpr")
    tier = "bench" if marks == "bench" else TIER
    whole = (
        config.args_source != pytest.Config.ArgsSource.ARGS
        and marks == TIER_MARKS[tier]
        and not config.getoption("keyword")
        and not config.getoption("deselect")
        and not config.getoption("lf", False)
    )
    return tier if whole else f"{tier}-selection"


def pytest_terminal_summary(terminalreporter: Any) -> None:
    config = terminalreporter.config
    if not _seconds or hasattr(config, "workerinput"):
        return  # nothing ran, or an xdist worker's share: the controller sums them all
    suite_s = SUITE_BUDGET_S[TIER]
    total = time.monotonic() - _started
    ranked = sorted(_seconds.items(), key=lambda kv: -kv[1])
    over = [(m, s, _budgets[m]) for m, s in ranked if m in _budgets and s > _budgets[m]]
    write = terminalreporter.write_line
    terminalreporter.section("seconds per test module")
    for module, seconds in ranked[:SHOWN]:
        write(f"{seconds:8.1f}s  {module}  (budget {_budgets.get(module, 0):.0f}s)")
    write(f"{total:8.1f}s  the run, {len(ranked)} modules (suite budget {suite_s:.0f}s)")
    for module, seconds, budget in over:
        write(f"over budget: {module} took {seconds:.0f}s, its budget {budget:.0f}s")
    if total > suite_s:
        write(f"over budget: the run took {total:.0f}s, the suite's {suite_s:.0f}s")
    out = Path(__file__).resolve().parents[2] / "var" / f"test-durations-{_file_tier(config)}.json"
    out.parent.mkdir(exist_ok=True)
    out.write_text(
        json.dumps(
            {
                "run_s": round(total, 1),
                "modules": {m: round(s, 2) for m, s in ranked},
                "budgets": {m: _budgets[m] for m, _ in ranked if m in _budgets},
                "over_budget": [m for m, _, _ in over],
            },
            indent=2,
        )
        + "\n"
    )
