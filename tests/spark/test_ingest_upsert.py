"""The upsert job on local Spark and the real Iceberg runtime, without the lease service."""

from __future__ import annotations

import json
import threading
from dataclasses import replace
from pathlib import Path

import pytest

from compactor.report import Outcome
from compactor.run import run_table
from demo.generate import KEY_FIELDS, EventGenerator, create_events_table
from demo.options import PipelineOptions
from ingest_gate.job.changes import changes, decode_batch, last_change_per_key
from ingest_gate.job.config import load_config
from ingest_gate.job.gating import Ungated
from ingest_gate.job.record import BatchHooks
from ingest_gate.job.run import BatchWriter, plan_decoder, run
from ingest_gate.job.snapshots import BATCH_ID, LEASE_ID, QUERY_ID
from ingest_gate.job.target import read_target
from jobkit.spark import SparkJobGroups
from tests.spark.conftest import snapshots, table_rows

pytestmark = pytest.mark.spark

WAIT_S = 120  # generous bound for a handful of tiny batches on a shared 2-core machine


class CrashAfterCommit(RuntimeError):
    """Stands for the driver dying after the Iceberg commit, before the checkpoint commit."""


def _config(
    spark,
    tmp_path: Path,
    name: str,
    *,
    format_version: int = 2,
    write_mode: str = "merge-on-read",
    **overrides,
):
    values = {
        "table": f"local.db.{name}",
        "landing_path": str(tmp_path / "landing"),
        "dead_letter_path": str(tmp_path / "dead-letter"),
        "checkpoint_path": str(tmp_path / "checkpoint"),
        "available_now": True,
        "max_files_per_trigger": 1,
        "gate_enabled": False,
        "key_columns": KEY_FIELDS,
    }
    values.update(overrides)
    config = load_config(overrides=values)
    create_events_table(spark, config.table, format_version=format_version, write_mode=write_mode)
    return config


def _ingest(spark, config, gen: EventGenerator, *, files: int, events: int) -> list:
    """`files` files of `events` each landed and ingested, ungated; the batches' records, once
    the table holds the generator's rows."""
    for _ in range(files):
        gen.write_file(config.landing_path, events)
    records = run(config, spark=spark).wait(timeout=WAIT_S)
    assert [r.outcome for r in records] == ["ungated"] * files
    assert table_rows(spark, config.table) == gen.expected_rows()
    return records


def _dead_letters(folder: Path) -> list[dict]:
    return [
        json.loads(line)
        for part in sorted(folder.rglob("part-*.json"))
        for line in part.read_text().splitlines()
    ]


def test_duplicates_within_and_across_batches_leave_one_latest_row_per_key(spark, tmp_path):
    config = _config(spark, tmp_path, "upsert")
    gen = EventGenerator(seed=21, update_ratio=0.3, duplicate_ratio=0.2, late_update_ratio=0.15)
    records = _ingest(spark, config, gen, files=3, events=40)
    assert sum(r.duplicates_dropped for r in records) > 0
    assert sum(r.rows_read for r in records) == 120


def test_the_click_event_ddl_makes_a_merge_on_read_v2_table_by_dt_and_hr(spark, tmp_path):
    create_events_table(spark, "local.db.created")
    props = {
        r["key"]: r["value"] for r in spark.sql("SHOW TBLPROPERTIES local.db.created").collect()
    }
    assert props["format-version"] == "2"
    for op in ("merge", "update", "delete"):
        assert props[f"write.{op}.mode"] == "merge-on-read"
    assert props["write.delete.granularity"] == "file"
    assert props["write.spark.fanout.enabled"] == "false"  # one open file per write task
    partition_fields = spark.table("local.db.created.partitions").schema["partition"].dataType
    assert partition_fields.fieldNames() == ["dt", "hr"]


def test_on_a_format_3_table_each_data_file_keeps_one_deletion_vector_until_compacted(
    spark, tmp_path, job_client
):
    """Format version 3 (docs/jobs.md §2): a MERGE that deletes from a data file replaces its
    deletion vector instead of adding a delete file beside the others, so the live delete files
    never outnumber the data files; the compactor applies and drops them, the rows unchanged."""
    config = _config(spark, tmp_path, "vectors", format_version=3)
    gen = EventGenerator(seed=13, update_ratio=0.6, duplicate_ratio=0.0, late_update_ratio=0.0)
    _ingest(spark, config, gen, files=4, events=60)
    expected = gen.expected_rows()

    vectors = spark.sql(
        f"SELECT file_format, referenced_data_file FROM {config.table}.delete_files"
    ).collect()
    data = {r[0] for r in spark.sql(f"SELECT file_path FROM {config.table}.data_files").collect()}
    referenced = [v.referenced_data_file for v in vectors]
    assert vectors and {v.file_format for v in vectors} == {"PUFFIN"}
    assert len(referenced) == len(set(referenced)) and set(referenced) <= data
    replaced = [s["summary"].get("removed-dvs") for s in snapshots(spark, config.table)]
    assert any(replaced), "no batch deleted again from a data file: the test shows nothing"

    table = PipelineOptions(table=config.table, plan={"min_delete_files": 1}).table_config()
    report = run_table(spark, client=job_client, config=table)
    assert report.outcome is Outcome.COMPACTED, report
    assert table_rows(spark, config.table) == expected
    assert spark.sql(f"SELECT count(*) FROM {config.table}.delete_files").first()[0] == 0


def test_on_a_copy_on_write_table_a_batch_rewrites_what_it_changes_and_leaves_no_delete_file(
    spark, tmp_path
):
    """Copy-on-write (docs/jobs.md §2): the same upserts, the data files they change rewritten
    instead of a delete file beside each, so a reader never applies one."""
    config = _config(spark, tmp_path, "rewritten", write_mode="copy-on-write")
    gen = EventGenerator(seed=13, update_ratio=0.6, duplicate_ratio=0.0, late_update_ratio=0.0)
    _ingest(spark, config, gen, files=3, events=60)
    summaries = [s["summary"] for s in snapshots(spark, config.table)]
    assert any(int(s.get("deleted-data-files", 0)) for s in summaries), "no batch rewrote a file"
    assert not any(int(s.get("added-delete-files", 0)) for s in summaries)


def test_each_commit_records_query_batch_and_lease_in_the_snapshot_summary(spark, tmp_path):
    config = _config(spark, tmp_path, "summary")
    gen = EventGenerator(seed=3, update_ratio=0.0)
    gen.write_file(config.landing_path, 10)
    gen.write_file(config.landing_path, 10)

    handle = run(config, spark=spark)
    records = handle.wait(timeout=WAIT_S)

    summaries = [s["summary"] for s in snapshots(spark, config.table)]
    assert [(s[QUERY_ID], s[BATCH_ID], s[LEASE_ID]) for s in summaries] == [
        (handle.query_id, "0", "none"),
        (handle.query_id, "1", "none"),
    ]
    assert [r.snapshot_id for r in records] == [
        s["snapshot_id"] for s in snapshots(spark, config.table)
    ]
    assert [r.rows_merged for r in records] == [10, 10]


def test_bad_records_go_to_dead_letters_with_their_reason_and_good_rows_commit(spark, tmp_path):
    config = _config(spark, tmp_path, "deadletter")
    gen = EventGenerator(seed=8, update_ratio=0.0)
    good = gen.records(3)
    bad = [
        '{"event_id":"x1","user_',
        '{"user_id":1,"event_time":"2024-05-01T10:00:00.000000Z","dt":"2024-05-01","hr":10}',
        '{"event_id":"x3","user_id":"abc","event_time":"2024-05-01T10:00:00.000000Z",'
        '"dt":"2024-05-01","hr":10}',
        '{"event_id":"x4","event_time":"2024-05-01T10:00:00.000000Z","dt":"2024-13-01","hr":10}',
        "[1, 2]",
    ]
    landing = Path(config.landing_path)
    landing.mkdir(parents=True)
    (landing / "events-1.jsonl").write_text("\n".join([good[0], *bad, *good[1:]]) + "\n")

    records = run(config, spark=spark).wait(timeout=WAIT_S)

    assert table_rows(spark, config.table) == gen.expected_rows()
    assert (records[0].rows_read, records[0].bad_rows) == (8, 5)
    letters = {d["raw"]: d["reason"] for d in _dead_letters(Path(config.dead_letter_path))}
    assert letters == {
        bad[0]: "unparseable JSON: not a JSON object",
        bad[1]: "missing field event_id",
        bad[2]: "wrong type for user_id: expected long",
        bad[3]: "wrong type for dt: expected date",
        bad[4]: "unparseable JSON: not a JSON object",
    }


def test_generated_bad_records_are_all_dead_lettered(spark, tmp_path):
    config = _config(spark, tmp_path, "deadletter_gen")
    gen = EventGenerator(seed=13, bad_ratio=0.3)
    gen.write_file(config.landing_path, 40)

    records = run(config, spark=spark).wait(timeout=WAIT_S)

    letters = _dead_letters(Path(config.dead_letter_path))
    assert len(letters) == records[0].bad_rows == gen.by_kind["bad"] > 0
    assert all(d["reason"] and d["batch_id"] == 0 for d in letters)
    assert table_rows(spark, config.table) == gen.expected_rows()


def _raw_batch(spark, lines):
    return spark.createDataFrame([(line,) for line in lines], "raw string")


def test_replayed_batch_changes_nothing(spark, tmp_path):
    config = _config(spark, tmp_path, "replay")
    gen = EventGenerator(seed=5)
    batch = _raw_batch(spark, gen.records(20))
    writer = BatchWriter(config, gate=Ungated(), query_id="query-replay")

    writer(batch, 0)
    before = (table_rows(spark, config.table), snapshots(spark, config.table))
    writer(batch, 0)

    assert (table_rows(spark, config.table), snapshots(spark, config.table)) == before
    assert [r.outcome for r in writer.records] == ["ungated", "replayed"]
    assert writer.records[1].snapshot_id == writer.records[0].snapshot_id


def test_replay_past_the_snapshot_guard_still_changes_no_row(spark, tmp_path):
    """The event-time guard alone keeps a replay harmless, e.g. once expire_snapshots removed
    the snapshot that the replay guard looks for."""
    config = _config(spark, tmp_path, "replay_unguarded")
    gen = EventGenerator(seed=6, update_ratio=0.4)
    first, second = gen.records(15), gen.records(15)
    writer = BatchWriter(config, gate=Ungated(), query_id="q", replay_guard=False)
    writer(_raw_batch(spark, first), 0)
    writer(_raw_batch(spark, second), 1)
    expected = table_rows(spark, config.table)

    writer(_raw_batch(spark, first), 0)  # older versions of keys that batch 1 updated

    assert table_rows(spark, config.table) == expected == gen.expected_rows()


def test_restart_after_crash_between_iceberg_commit_and_checkpoint_loses_and_duplicates_nothing(
    spark, tmp_path
):
    config = _config(spark, tmp_path, "crash")
    gen = EventGenerator(seed=9, update_ratio=0.4, duplicate_ratio=0.1)
    for _ in range(3):
        gen.write_file(config.landing_path, 15)

    def crash_once(batch_id, gate_pass):
        if batch_id == 1:
            raise CrashAfterCommit("after the MERGE of batch 1")

    first = run(config, spark=spark, hooks=BatchHooks(after_merge=crash_once))
    with pytest.raises(CrashAfterCommit):
        first.wait(timeout=WAIT_S)
    assert [r.batch_id for r in first.records] == [0, 1]  # batch 1 committed to Iceberg

    second = run(config, spark=spark)
    records = second.wait(timeout=WAIT_S)

    assert second.query_id == first.query_id  # the same query, resumed from its checkpoint
    assert [(r.batch_id, r.outcome) for r in records] == [(1, "replayed"), (2, "ungated")]
    assert table_rows(spark, config.table) == gen.expected_rows()
    batch_ids = [s["summary"][BATCH_ID] for s in snapshots(spark, config.table)]
    assert batch_ids == ["0", "1", "2"]


def test_a_run_stopped_at_its_bound_mid_batch_ends_cleanly_and_the_batch_runs_again(
    spark, tmp_path
):
    """`max_batches` reached while the next batch runs: stopping interrupts that batch, which is
    not a failure (the job exits 0); the next start runs it, and the table is exact."""
    config = _config(
        spark, tmp_path, "stopped", available_now=False, max_batches=1, trigger_interval_s=0.1
    )
    gen = EventGenerator(seed=12, update_ratio=0.4)
    for _ in range(2):
        gen.write_file(config.landing_path, 15)
    in_second = threading.Event()

    def hold_the_second(batch_id, gate_pass):
        if batch_id == 1:
            in_second.set()
            # on the query's own thread in the JVM, as a MERGE waits: the stop interrupts it
            spark.sparkContext._jvm.java.lang.Thread.sleep(WAIT_S * 1000)

    first = run(config, spark=spark, hooks=BatchHooks(before_merge=hold_the_second))
    assert in_second.wait(WAIT_S), "the second batch never started"
    records = first.wait(timeout=WAIT_S)  # the bound is reached: stops at once

    assert [(r.batch_id, r.outcome) for r in records] == [(0, "ungated"), (1, "interrupted")]
    assert first.interrupted and first.summary()["batches"] == 1
    second = run(replace(config, available_now=True, max_batches=None), spark=spark)
    assert [(r.batch_id, r.outcome) for r in second.wait(timeout=WAIT_S)] == [(1, "ungated")]
    assert table_rows(spark, config.table) == gen.expected_rows()


def test_within_a_batch_a_tie_on_event_time_goes_to_the_record_written_later(spark, tmp_path):
    def line(amount):
        return json.dumps(
            {
                "event_id": "e1",
                "user_id": 1,
                "product_id": "p1",
                "event_type": "click",
                "event_time": "2024-05-01T10:00:00.000000Z",
                "dt": "2024-05-01",
                "hr": 10,
                "amount": amount,
            }
        )

    raw = spark.createDataFrame(
        [
            (line(1.0), "file:/l/events-2.jsonl", 0),
            (line(2.0), "file:/l/events-1.jsonl", 5),
            (line(3.0), "file:/l/events-2.jsonl", 1),
        ],
        "raw string, _source_file string, _source_pos long",
    )
    config = _config(spark, tmp_path, "tie")
    decoder = plan_decoder(config, read_target(spark, config.table, catalog=config.catalog))
    kept = last_change_per_key(
        changes(decode_batch(raw, decoder)),
        key_columns=decoder.key_columns,
        names=decoder.target.names,
        event_time_column="event_time",
    )
    assert [r["amount"] for r in kept.collect()] == [3.0]


def test_job_group_is_restored_after_the_gate_leaves(spark):
    sc = spark.sparkContext
    sc.setJobGroup("stream-run", "the query's own group")
    groups = SparkJobGroups(sc)
    groups.set("lakelock-1")
    assert sc.getLocalProperty("spark.jobGroup.id") == "lakelock-1"
    groups.clear()
    assert sc.getLocalProperty("spark.jobGroup.id") == "stream-run"
