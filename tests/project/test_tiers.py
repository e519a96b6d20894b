"""How bin/test spreads the suite over its two workers (tests/conftest.py): the Spark
benchmarks' small runs and the modules of JVM_APART are units of their own beside the JVM
modules, and nothing else of tests/spark/ is."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import JVM_APART, module_of, runs_a_benchmark, runs_a_jvm, runs_apart

pytestmark = pytest.mark.slow  # two collections of the suite, about 15 s each

ROOT = Path(__file__).resolve().parents[2]


def _collected(*args: str) -> set[str]:
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider", *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return {module_of(line) for line in done.stdout.splitlines() if "::" in line}


def test_the_benchmark_units_are_exactly_the_bench_tier_and_outside_the_jvm_unit():
    bench = _collected("-m", "bench", "tests/spark")
    others = _collected("-m", "not bench", "tests/spark")
    assert len(bench) >= 10, bench
    assert all(runs_a_benchmark(m) and not runs_a_jvm(m) for m in bench), bench
    # the modules named apart exist, each a unit of its own; every other module of the JVM unit
    # keeps its place there: its tests share the worker's Spark session
    assert set(JVM_APART) <= others
    assert all(runs_apart(m) and not runs_a_jvm(m) for m in JVM_APART)
    rest = others - set(JVM_APART)
    assert all(runs_a_jvm(m) and not runs_apart(m) for m in rest), rest
    assert runs_a_jvm("tests/catalog/test_trino.py::test_x")
    assert not runs_a_jvm("tests/lock/test_switch.py::test_x")
