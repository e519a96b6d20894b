"""One wire model for both sides: the service answers with `service.wire` models (so
openapi.json describes the real bodies), and the client parses the same models without
importing the server."""

from __future__ import annotations

import subprocess
import sys

from service.wire import Draining, Lease, Released, TableState
from tests.support.helpers import ROOT, commit, maintenance, release, state


def test_the_client_and_the_wire_models_import_no_server_module():
    check = (
        "import sys, service.client, service.wire; "
        "print(sorted({m.split('.')[0] for m in sys.modules} & "
        "{'fastapi', 'starlette', 'sqlalchemy', 'uvicorn', 'alembic'}))"
    )
    done = subprocess.run(
        [sys.executable, "-c", check], cwd=ROOT, capture_output=True, text=True, check=True
    )
    assert done.stdout.strip() == "[]"


def test_answers_parse_as_the_models_openapi_names(api):
    spec = api.get("/openapi.json").json()

    def model(path: str, method: str, status: str) -> str:
        content = spec["paths"][path][method]["responses"][status]["content"]
        return content["application/json"]["schema"]["$ref"].rsplit("/", 1)[-1]

    held = commit(api, partitions=["dt=1"]).json()
    drained = maintenance(api, partitions=["dt=1"], request_id="run-1")
    assert drained.status_code == 202
    assert model("/v1/tables/{table}/commit-leases", "post", "201") == "Lease"
    assert model("/v1/tables/{table}/maintenance-lease", "post", "202") == "Draining"
    assert model("/v1/tables/{table}", "get", "200") == "TableState"
    assert model("/v1/leases/{lease_id}", "delete", "200") == "Released"
    assert model("/v1/tables/{table}/claim", "post", "201") == "Lease"
    assert model("/v1/tables/{table}/debt", "put", "200") == "TableDebt"
    bodies = {
        path: spec["paths"][path][method]["requestBody"]["content"]["application/json"]["schema"]
        for path, method in (
            ("/v1/tables/{table}/claim", "post"),
            ("/v1/tables/{table}/debt", "put"),
        )
    }
    assert bodies["/v1/tables/{table}/claim"]["$ref"].endswith("/ClaimBody")
    assert bodies["/v1/tables/{table}/debt"]["$ref"].endswith("/DebtBody")
    debt_body = spec["components"]["schemas"]["DebtBody"]
    assert debt_body["additionalProperties"] is False
    assert set(debt_body["required"]) == {
        "data_files",
        "small_files",
        "delete_files",
        "partitions_over_target",
    }

    lease = Lease.model_validate(held)
    assert lease.partitions == ("dt=1",) and lease.kind == "commit" and lease.state == "live"
    assert Draining.model_validate(drained.json()).request_id == "run-1"
    table = TableState.model_validate(state(api))
    assert [x.lease_id for x in table.commit_leases] == [lease.lease_id]
    assert table.intent is not None and table.intent.partitions == ("dt=1",)
    ended = Released.model_validate(release(api, held).json())
    assert (ended.state, ended.lease.lease_id) == ("released", lease.lease_id)
