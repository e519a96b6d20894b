"""Fixed cases: each request a fuzzer once found answered outside the contract, sent as it was.

`bin/fuzz` explores with new seeds; what it finds is added here, so the suite keeps refusing it
whatever seed the fuzzers run with.
"""

from __future__ import annotations

import httpx
import pytest

TABLE = "lake.db.events"


@pytest.mark.parametrize(
    "partition",
    [
        # a number in the schema's negative cases is text in a query string: it was answered
        # 200 while openapi.json, stating the partition name's rule, refuses it
        "-1.8814821144814994e-188",
        "",
        "dt",
        "dt=2024/",
        "a" * 512 + "=",  # one character over the longest name
    ],
)
def test_a_backpressure_let_go_refuses_a_partition_that_is_no_partition_name(
    api: httpx.Client, partition: str
) -> None:
    answer = api.delete(
        f"/v1/tables/{TABLE}/backpressure",
        params={"holder": "fuzz-compactor", "partition": partition},
    )
    assert answer.status_code == 422, answer.text
    assert answer.headers["content-type"] == "application/problem+json"
    problem = answer.json()
    assert problem["type"] == "urn:lakelock:invalid-request"
    assert "is not a partition name" in problem["detail"]
    assert "dt=2024-06-20/hr=13" in problem["detail"], "says what to send instead"
    # nothing was made known: a refusal changes nothing
    assert api.get(f"/v1/tables/{TABLE}").status_code == 404


def test_the_exact_request_the_fuzzer_found_is_refused(api: httpx.Client) -> None:
    answer = api.delete(
        f"/v1/tables/{TABLE}/backpressure?holder=fuzz&partition=-1.8814821144814994e-188"
    )
    assert answer.status_code == 422, answer.text


def test_a_backpressure_let_go_takes_partition_names(api: httpx.Client) -> None:
    answer = api.delete(
        f"/v1/tables/{TABLE}/backpressure",
        params=[("holder", "fuzz"), ("partition", "dt=2024-06-20/hr=13"), ("partition", "id=")],
    )
    assert answer.status_code != 422, answer.text


# the stateful phase's request (seed 20240620): schema-valid, and a partition counts more
# equality delete files than delete files, which no report can mean (tests/server/schemathesis.toml)
FOUND_DEBT = {
    "data_files": 534483113,
    "partitions": {
        "6kw=/*Pt00=Gf0": {
            "delete_files": 1911.0,
            "data_files": 10000000,
            "equality_delete_files": 10883.0,
        },
        "M=E5AHTgEmPL9L0pq": {"delete_files": 146, "data_files": 726254.0},
    },
    "small_files": 30758,
    "delete_files": 351685163,
    "partitions_over_target": 6256.0,
    "measured_at": "2645-05-15T09:05:57.245693Z",
    "snapshot_id": -9223372036854775807,
}
FOUND_TABLE = ".".join(["a" + "0" * 62, "a" + "0" * 63, "a" + "0" * 63])


def test_a_debt_with_more_equality_deletes_than_deletes_is_refused_and_says_the_fix(
    api: httpx.Client,
) -> None:
    answer = api.put(f"/v1/tables/{FOUND_TABLE}/debt", json=FOUND_DEBT)
    assert answer.status_code == 422, answer.text
    assert answer.headers["content-type"] == "application/problem+json"
    problem = answer.json()
    assert problem["errors"][0]["field"] == "partitions.6kw=/*Pt00=Gf0"
    assert (
        "equality_delete_files (10883) counts some of the delete_files (1911)" in problem["detail"]
    )
    assert "send at most as many" in problem["detail"]
    # nothing was made known: a refusal changes nothing
    assert api.get(f"/v1/tables/{FOUND_TABLE}").status_code == 404
    fixed = {
        **FOUND_DEBT,
        "partitions": {
            "dt=2024-06-20": {"delete_files": 3, "data_files": 2, "equality_delete_files": 3}
        },
    }
    assert api.put(f"/v1/tables/{FOUND_TABLE}/debt", json=fixed).status_code == 200
