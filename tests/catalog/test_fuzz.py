"""The Iceberg REST catalog at /iceberg, fuzzed with Apache Iceberg's own OpenAPI document.

schemathesis runs the operations lakelock serves (service.server.routes.catalog.ENDPOINTS, and `GET
/v1/config`) from Iceberg's `rest-catalog-open-api.yaml` against a live service with the catalog on:
on SQLite with the operator's token, a job's under 1.11's document and a reader's, on MariaDB with
the operator's under 1.11's (whose calls reach every statement): no input may give a 5xx, every
status must be one the specification declares for the operation, and a call without a token must be
refused. Then no file may have been written outside the warehouse: every table the run made points
into it, nothing new lies beside it in the test's folder, and no place a fuzzed request named (a
path or `file:` URI anywhere in its URL or body, from the run's HAR record) holds table metadata
written during the run. Only what the fuzzed calls could have caused is judged: other programs on
the machine may write Iceberg tables under `/tmp` meanwhile.

The documents are Apache Iceberg's (Apache License 2.0), kept unchanged in
tests/catalog/iceberg-openapi/ (its README says where from): 1.9.2's, which the test was written
against, unless LAKELOCK_ICEBERG_OPENAPI names another, and 1.11.0's. Their paths have a
`{prefix}` segment, which lakelock's catalog does not (its config answers no prefix); the test
writes an adapted copy without it, and without the operations lakelock does not serve, into its
own folder.

The run is bounded by `MAX_EXAMPLES` per operation and phase (a reader's by a quarter of it:
the token's scope refuses its writes before their input is read) and uses the fixed seed of
tests/support/fuzzing.py; `bin/fuzz` explores with new seeds.
"""

from __future__ import annotations

import copy
import json
import os
import subprocess
import sys
import time
import urllib.parse
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml
from sqlalchemy import create_engine, select

from service.catalog import locations
from service.lock.db import iceberg_tables_t
from service.server.routes.catalog import ENDPOINTS
from tests.conftest import TOKENS, auth, start_front
from tests.support.fuzzing import fuzz_seed, repeat_hint

pytestmark = [pytest.mark.slow, pytest.mark.dialect]

SPEC_ENV = "LAKELOCK_ICEBERG_OPENAPI"
SPECS = Path(__file__).with_name("iceberg-openapi")
SPEC_1_9 = SPECS / "rest-catalog-open-api-1.9.2.yaml"
SPEC_1_11 = SPECS / "rest-catalog-open-api-1.11.0.yaml"
# bin/fuzz may ask for more (LAKELOCK_FUZZ_EXAMPLES)
MAX_EXAMPLES = int(os.environ.get("LAKELOCK_FUZZ_EXAMPLES", "20"))
# a reader's: its writes are refused by the token's scope before their input is read, and its
# reads run what the operator's run reads with every example; a few judge the refusals' statuses
READER_EXAMPLES = max(1, MAX_EXAMPLES // 4)
ST = Path(sys.executable).with_name("st")
CONFIG = Path(__file__).with_name("schemathesis-iceberg.toml")
# what the configuration's fixed path parameters name: made before the run, so that the
# commit, create and property operations reach the catalog's logic, not only its 404
NAMESPACE, TABLE = "fuzz", "t"
SERVED = [*ENDPOINTS, "GET /v1/config"]
SPEC_COPY = "iceberg-rest-catalog.json"  # the adapted document, in the test's folder
SPEC_COPY_1_11 = "iceberg-rest-catalog-1.11.json"
REQUESTS = "requests.har"  # every request the fuzzer sent, in its working folder
# the fuzzer's working folders: a role's against 1.9.2's document, and against 1.11's
RUNS = {f"fuzz-{role}{document}" for role in TOKENS for document in ("", "-1.11")}


def spec_path() -> Path:
    """Iceberg's OpenAPI document: the one LAKELOCK_ICEBERG_OPENAPI names, else 1.9.2's."""
    return Path(os.environ.get(SPEC_ENV) or SPEC_1_9)


def adapted(spec: dict[str, Any]) -> dict[str, Any]:
    """`spec` with the operations lakelock serves only, at lakelock's paths: no `{prefix}`
    segment and no `prefix` parameter (the catalog's config names no prefix, so clients send
    none). The server is the caller's (`st run --url <service>/iceberg`).

    Raises:
        AssertionError: an operation lakelock serves is not in `spec`.
    """
    served: dict[str, set[str]] = {}
    for endpoint in SERVED:
        method, path = endpoint.split(" ", 1)
        served.setdefault(path, set()).add(method.lower())
    paths: dict[str, Any] = {}
    for path, methods in served.items():
        item = spec["paths"].get(path)
        assert item is not None, f"{path}: served by lakelock, not in Iceberg's document"
        missing = methods - set(item)
        assert not missing, f"{path}: {sorted(missing)} served by lakelock, not in the document"
        kept = {
            key: copy.deepcopy(value)
            for key, value in item.items()
            if key in methods or key not in _METHODS
        }
        for operation in [kept, *(kept[m] for m in methods)]:
            if "parameters" in operation:
                operation["parameters"] = [p for p in operation["parameters"] if not _prefix(p)]
        paths[path.replace("/{prefix}", "")] = kept
    return {**spec, "servers": [{"url": "/"}], "paths": paths}


_METHODS = {"get", "put", "post", "delete", "options", "head", "patch", "trace"}


def _prefix(parameter: dict[str, Any]) -> bool:
    return (
        parameter.get("$ref") == "#/components/parameters/prefix"
        or parameter.get("name") == "prefix"
    )


@pytest.fixture(scope="module")
def iceberg_spec() -> dict[str, Any]:
    path = spec_path()
    if not path.is_file():
        pytest.fail(f"{SPEC_ENV} names {path}, which is no file: name an OpenAPI document")
    return yaml.safe_load(path.read_text())


@pytest.fixture(scope="module")
def front(
    request: pytest.FixtureRequest,
    tmp_path_factory: pytest.TempPathFactory,
    iceberg_spec: dict[str, Any],
) -> Iterator[Any]:
    """A service with the catalog on, holding the namespace and table the configuration's
    fixed path parameters name; `spec`: the adapted document, in its folder."""
    server = start_front(request, tmp_path_factory, "fuzz")
    spec = server.folder / SPEC_COPY
    spec.write_text(json.dumps(adapted(iceberg_spec)))
    server.spec = spec  # type: ignore[attr-defined]
    try:
        _seed_catalog(server)
        yield server
    finally:
        server.stop()


def _seed_catalog(front: Any) -> None:
    """The namespace and table the configuration's fixed path parameters name."""
    schema = {
        "type": "struct",
        "schema-id": 0,
        "fields": [{"id": 1, "name": "id", "type": "long", "required": False}],
    }
    with httpx.Client(base_url=f"{front.url}/iceberg", headers=auth("job"), timeout=30) as c:
        made = c.post("/v1/namespaces", json={"namespace": [NAMESPACE]})
        assert made.status_code == 200, made.text
        made = c.post(f"/v1/namespaces/{NAMESPACE}/tables", json={"name": TABLE, "schema": schema})
        assert made.status_code == 200, made.text


def _schemathesis(
    spec: Path, url: str, workdir: Path, role: str, seed: int
) -> tuple[subprocess.CompletedProcess, dict[str, Any]]:
    workdir.mkdir()
    report, har = workdir / "report.json", workdir / REQUESTS
    done = subprocess.run(
        [
            str(ST),
            *("--no-color", "--config-file", str(CONFIG)),
            "run",
            str(spec),
            *("--url", url),
            *("--report", "json,har", "--report-json-path", str(report)),
            *("--report-har-path", str(har)),
            *("--header", f"Authorization: Bearer {TOKENS[role]}"),
            *("--checks", ",".join(CHECKS)),
            *("--max-examples", str(READER_EXAMPLES if role == "reader" else MAX_EXAMPLES)),
            # the same cases every run; no examples kept from earlier runs to replay
            *("--seed", str(seed), "--generation-database", "none"),
            # one worker: hypothesis describes its lambdas with ast.parse, which CPython before
            # 3.11.8 cannot run in two threads at once (gh-106905)
            *("--request-timeout", "30", "--workers", "1"),
            # a failure's report shows the request as sent: pyiceberg's map types have fields
            # named `key` and `key-id`, which schemathesis would mask as secrets
            *("--output-sanitize", "false"),
            # every failing case in the report, not only each operation's first
            "--continue-on-failure",
        ],
        cwd=workdir,  # its own state (.schemathesis/) stays out of the repository
        capture_output=True,
        text=True,
        timeout=600,
    )
    return done, json.loads(report.read_text()) if report.exists() else {}


# Every check that can judge lakelock by Iceberg's document: no 5xx; only statuses the
# document declares for the operation; a call without a token refused; success bodies and
# headers as declared. Left off:
# - content_type_conformance: lakelock answers every error as application/problem+json (RFC
#   9457, with Iceberg's `error` object beside its members), where the document declares
#   application/json; Iceberg's clients read either. (response_schema_conformance judges the
#   bodies of the declared media type only, so the errors' extra members pass it.)
# - negative_data_rejection: lakelock reads bodies as Iceberg's own catalogs do, not as strictly
#   as the document types them: it does not page (`pageSize` is ignored, whatever its value),
#   takes property values as strings, keeps no metrics report (so does not read one), and an
#   absent `updates` or `requirements` is an empty list.
# - positive_data_acceptance: a well-formed request may still be refused with 400 for what
#   the document cannot state: a table lakelock cannot lease (one namespace level, identifier
#   names), a location outside the warehouse, a property that chooses a class, the size caps
#   (docs/catalogs.md, "What the front refuses").
# - use_after_free, ensure_resource_availability: the document has no links, and those
#   schemathesis infers put a created namespace (a JSON list of levels) into the next call's
#   path as the list's text, `['db']`, where the path has the levels joined with %1F: that call
#   finds no such namespace, rightly. (The stateful phase runs, with the checks above.)
CHECKS = [
    "not_a_server_error",
    "status_code_conformance",
    "ignored_auth",
    "response_schema_conformance",
    "response_headers_conformance",
    "missing_required_header",
    "unsupported_method",
    "allow_header_conformance",
]


# The runs whose calls reach every statement: the operator's (an operator may do all that a job
# may, and drop, rename and set namespace properties) under 1.9.2's document, and a job's under
# 1.11's idempotency keys (below), on SQLite, with a reader's, refused every write. On MariaDB,
# where the dialect is what differs, one run reaches every statement: the operator's under
# 1.11's document (the job's calls and 1.9.2's operations are a part of it).
@pytest.mark.parametrize(
    ("front", "role"),
    [("sqlite", "reader"), ("sqlite", "operator")],
    indirect=["front"],
    scope="module",  # one front for each database, as the fixture's scope says
)
def test_no_call_in_icebergs_own_contract_fails_the_catalog(front: Any, role: str) -> None:
    _fuzzed(front, front.spec, role, f"fuzz-{role}")


@pytest.mark.parametrize(
    ("front", "role"),
    [("sqlite", "job"), pytest.param("mariadb", "operator", marks=pytest.mark.mariadb)],
    indirect=["front"],
    scope="module",  # one front for each database, as the fixture's scope says
)
def test_no_call_in_icebergs_1_11_contract_fails_the_catalog(front: Any, role: str) -> None:
    """Iceberg 1.11's document: the same operations, with the `Idempotency-Key` header the
    front honours (docs/catalog-front.md §4) sent on each mutation, and the config's
    `idempotency-key-lifetime`; a job token's calls on SQLite, the operator's on MariaDB."""
    spec = front.folder / SPEC_COPY_1_11
    spec.write_text(json.dumps(adapted(yaml.safe_load(SPEC_1_11.read_text()))))
    _fuzzed(front, spec, role, f"fuzz-{role}-1.11")


def _fuzzed(front: Any, spec: Path, role: str, run: str) -> None:
    folder: Path = front.folder
    seed = fuzz_seed()
    since = time.time()
    started = time.monotonic()
    workdir = folder / run
    done, report = _schemathesis(spec, f"{front.url}/iceberg", workdir, role, seed)
    took = time.monotonic() - started
    summary = (
        f"{run}, {took:.0f}s, "
        + repeat_hint(seed).replace("test_contract_cases.py", "test_catalog_cases.py")
        + "\n"
        + json.dumps(
            {k: report.get(k) for k in ("seed", "operations", "test_cases", "failures", "errors")}
        )
    )
    assert done.returncode == 0, f"{summary}\n{done.stdout[:30000]}\n{done.stderr[-5000:]}"
    assert report["failures"] == [] and report["errors"] == [], summary
    assert report["operations"]["tested"] == report["operations"]["selected"] == len(SERVED)
    assert "Traceback" not in front.log(), front.log()[-20000:]
    _nothing_outside_the_warehouse(front, _named_places(workdir / REQUESTS), since)


def _strings(value: Any) -> Iterator[str]:
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for key, item in value.items():
            yield from _strings(key)
            yield from _strings(item)
    elif isinstance(value, list):
        for item in value:
            yield from _strings(item)


def _named_places(har: Path) -> set[Path]:
    """Every local path a fuzzed request named: an absolute path or a `file:` URI in its URL
    (path and query) or anywhere in its JSON body."""
    named: set[Path] = set()
    for entry in json.loads(har.read_text())["log"]["entries"]:
        request = entry["request"]
        url = urllib.parse.urlsplit(request["url"])
        texts = [
            *(urllib.parse.unquote(part) for part in url.path.split("/")),
            *(value for _, value in urllib.parse.parse_qsl(url.query)),
        ]
        body = request.get("postData", {}).get("text")
        if body:
            try:
                texts.extend(_strings(json.loads(body)))
            except ValueError:
                texts.append(body)
        for text in texts:
            place = urllib.parse.unquote(text)
            for scheme in ("file://localhost", "file://", "file:"):
                place = place.removeprefix(scheme)
            if place.startswith("/") and "\x00" not in place:
                named.add(Path(place))
    return named


def _written_since(place: Path, since: float) -> list[Path]:
    """Table metadata at a place a request named, written since the run began: the place
    itself (a metadata file), metadata files in it (a metadata path) or in its `metadata`
    folder (a table location)."""
    found: list[Path] = []
    try:
        if place.is_file() and place.stat().st_mtime >= since:
            found.append(place)
    except OSError:
        pass  # a name the file system cannot hold holds nothing
    for folder in (place, place / "metadata"):
        try:
            children = list(folder.iterdir())
        except OSError:
            continue
        found.extend(
            p
            for p in children
            if p.name.endswith((".metadata.json", ".avro")) and p.stat().st_mtime >= since
        )
    return found


def _nothing_outside_the_warehouse(front: Any, named: set[Path], since: float) -> None:
    warehouse: Path = front.warehouse
    engine = create_engine(front.db_url)
    try:
        with engine.connect() as conn:
            pointed = [
                row.metadata_location
                for row in conn.execute(select(iceberg_tables_t.c.metadata_location))
            ]
    finally:
        engine.dispose()
    assert pointed, "the run's catalog has no table"
    outside = [p for p in pointed if not locations.inside(p, warehouse.as_uri())]
    assert outside == [], outside
    folder: Path = front.folder
    ours = {"lakelock.db", "lakelock.db-wal", "lakelock.db-shm", "lakelock.db-journal"}
    for path in folder.rglob("*"):
        if not path.is_file() or path.is_relative_to(warehouse):
            continue
        relative = path.relative_to(folder)
        expected = (
            path.name in ours
            or (relative.parts[0] == path.name and path.name.startswith("service-"))
            or relative in (Path(SPEC_COPY), Path(SPEC_COPY_1_11))
            or relative.parts[0] in RUNS  # the fuzzer's own working folders
        )
        assert expected, f"{path}: written outside the warehouse"
    written = [
        p
        for place in named
        if not place.is_relative_to(warehouse)
        for p in _written_since(place, since)
    ]
    assert written == [], f"the catalog wrote outside its warehouse: {written}"
