"""The tree reads by role: each part imports only the parts below it (docs/design.md §2).

A job host installs the client and the jobs, never the server; the image carries the server,
never the client or the operators' tools. This test keeps the imports honest about it, counting
imports inside functions too.
"""

from __future__ import annotations

import ast
import functools
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

# part -> the parts it may import (its own modules always)
MAY_IMPORT = {
    "service.wire": set(),
    "service.client": {"service.wire"},
    "service.lock": {"service.wire"},
    "service.catalog": {"service.wire", "service.lock"},
    "service.server": {"service.wire", "service.lock", "service.catalog", "service.extras"},
    "service.ops": {"service.wire", "service.client", "service.extras"},
    "service.extras": set(),
    "service.__main__": {"service.server", "service.lock", "service.extras"},
    "jobkit": set(),
    "ingest_gate": {"service.client", "service.wire", "service.extras"},
    "ingest_gate.job": {
        "ingest_gate",
        "jobkit",
        "service.client",
        "service.wire",
        "service.extras",
    },
    "ingest_gate.__main__": {"ingest_gate.job", "jobkit", "service.wire", "service.extras"},
    "compactor": {"jobkit", "service.client", "service.wire", "service.extras"},
    "lakelock_submit": {
        "jobkit",
        "ingest_gate.job",
        "ingest_gate.__main__",
        "compactor",
        "service.extras",
    },
}
PARTS = sorted(MAY_IMPORT, key=len, reverse=True)


def part_of(module: str) -> str | None:
    return next((p for p in PARTS if module == p or module.startswith(p + ".")), None)


def imports_of(path: Path) -> set[str]:
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add(node.module)
            found.update(f"{node.module}.{a.name}" for a in node.names)
        elif isinstance(node, ast.Import):
            found.update(a.name for a in node.names)
    return found


def sources(root: Path) -> list[Path]:
    """The Python files of the parts' packages under `root` (never a virtualenv's)."""
    packages = {part.split(".")[0] for part in MAY_IMPORT}
    return sorted(p for package in packages for p in (root / package).rglob("*.py"))


@functools.cache
def crossings(root: Path = ROOT) -> list[str]:
    out = []
    for path in sources(root):
        module = ".".join(path.relative_to(root).with_suffix("").parts).removesuffix(".__init__")
        part = part_of(module)
        if part is None:
            continue
        for imported in sorted(imports_of(path)):
            target = part_of(imported)
            if target is None and imported.split(".")[0] in {"service", "demo", "benchmarks"}:
                target = imported  # a package the part may never import (demo, a bare `service`)
                if imported == "service":
                    continue  # `from service.x import y` also names the package itself
            if target is not None and target != part and target not in MAY_IMPORT[part]:
                out.append(f"{module} imports {imported}")
    return out


def test_the_checker_sees_a_crossing(tmp_path):
    assert part_of("service.client.renewer") == "service.client"
    assert part_of("service.clientele") is None
    bad = tmp_path / "service" / "wire" / "x.py"
    bad.parent.mkdir(parents=True)
    bad.write_text("def f():\n    from service.lock.db import now\n")
    assert crossings(tmp_path) == [
        "service.wire.x imports service.lock.db",
        "service.wire.x imports service.lock.db.now",
    ]


@pytest.mark.parametrize("part", sorted(MAY_IMPORT))
def test_each_part_imports_only_the_parts_below_it(part):
    assert [c for c in crossings() if part_of(c.split()[0]) == part] == []


def sqlalchemy_users(root: Path = ROOT) -> list[str]:
    """The modules of service.server that import SQLAlchemy: the HTTP layer translates, every
    statement and database error type is service.lock's (docs/design.md §2)."""
    return [
        ".".join(path.relative_to(root).with_suffix("").parts)
        for path in sorted((root / "service" / "server").rglob("*.py"))
        if any(name.split(".")[0] == "sqlalchemy" for name in imports_of(path))
    ]


def test_the_checker_sees_sqlalchemy_in_the_server(tmp_path):
    routes = tmp_path / "service" / "server" / "routes"
    routes.mkdir(parents=True)
    (routes / "x.py").write_text("def f():\n    from sqlalchemy.exc import DBAPIError\n")
    (routes / "y.py").write_text("import sqlalchemy\n")
    (routes / "z.py").write_text("from service.lock.db import DatabaseError\n")
    assert sqlalchemy_users(tmp_path) == ["service.server.routes.x", "service.server.routes.y"]


def test_the_server_never_imports_sqlalchemy():
    assert sqlalchemy_users() == []
