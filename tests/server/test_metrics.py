from prometheus_client.parser import text_string_to_metric_families

from tests.support.helpers import backdate, commit, maintenance, release, renew


def _samples(api):
    text = api.get("/metrics").text
    found = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            key = (sample.name, tuple(sorted(sample.labels.items())))
            found[key] = sample.value
    return found


def test_metrics_count_grants_denials_expiries_and_renew_failures(api, db_url):
    lease = commit(api).json()
    maintenance(api)  # drains: intent
    commit(api, holder="ingest-2")  # denied: intent
    release(api, lease)
    held = maintenance(api).json()
    backdate(db_url, held)
    renew(api, held)  # expired
    samples = _samples(api)
    table = ("scope", "table")
    assert samples[("lakelock_grants_total", (("kind", "commit"), table))] == 1
    assert samples[("lakelock_grants_total", (("kind", "maintenance"), table))] == 1
    denied = ("lakelock_denials_total", (("kind", "commit"), ("reason", "intent"), table))
    assert samples[denied] == 1
    assert samples[("lakelock_expiries_total", (("kind", "maintenance"),))] == 1
    assert samples[("lakelock_renew_failures_total", (("outcome", "expired"),))] == 1
    assert samples[("lakelock_lease_hold_seconds_count", (("kind", "commit"), table))] == 1


def test_metrics_tell_partition_scoped_leases_from_whole_table_ones(api):
    commit(api, partitions=["dt=2024-06-20/hr=13"])
    commit(api, table="lake.db.other", holder="ingest-2")
    maintenance(api, partitions=["dt=2024-06-19/hr=01"])  # disjoint: granted
    maintenance(api, holder="compactor-2", partitions=["dt=2024-06-20/hr=13"])  # drains
    commit(api, holder="ingest-3", partitions=["dt=2024-06-20/hr=13"])  # denied: intent
    samples = _samples(api)
    scoped, table = ("scope", "partitions"), ("scope", "table")
    assert samples[("lakelock_grants_total", (("kind", "commit"), scoped))] == 1
    assert samples[("lakelock_grants_total", (("kind", "commit"), table))] == 1
    assert samples[("lakelock_grants_total", (("kind", "maintenance"), scoped))] == 1
    assert samples[("lakelock_intents_opened_total", (scoped,))] == 1
    denied = ("lakelock_denials_total", (("kind", "commit"), ("reason", "intent"), scoped))
    assert samples[denied] == 1


def test_request_latency_is_recorded_per_route(api):
    commit(api)
    samples = _samples(api)
    key = (
        "lakelock_request_duration_seconds_count",
        (
            ("method", "POST"),
            ("route", "/v1/tables/{table}/commit-leases"),
            ("status", "201"),
        ),
    )
    assert samples[key] == 1
