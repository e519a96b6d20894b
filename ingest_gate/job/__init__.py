"""The streaming ingest job: source, decode, last change per key, gate, MERGE (docs/jobs.md §1,
§2); `python -m ingest_gate` runs it.

ingest_gate.job.run        run(config): the Structured Streaming query, one MERGE per micro-batch
ingest_gate.job.record     what a micro-batch did (BatchRecord: its JSON log line), test hooks
ingest_gate.job.gating     the gate a batch passes before its commit (a lakelock Gate, or Ungated)
ingest_gate.job.config     IngestConfig: defaults, a TOML file, the command line
ingest_gate.job.source     the streaming source: a landing folder of JSON lines, or Kafka
ingest_gate.job.target     the target table as the job sees it: the table is the schema
ingest_gate.job.decode     records of any format against the target table's schema (executors)
ingest_gate.job.changes    a micro-batch as the changes to merge: dead letters, last change
ingest_gate.job.merge      the MERGE statement of one micro-batch
ingest_gate.job.snapshots  the snapshot-summary properties of ingest commits, the replay check
ingest_gate.job.table      what the job expects of its table, and reading one back
ingest_gate.job.kafka      Kafka: the checkpoint's position, retention losses, lag
"""

EXECUTOR_PACKAGES = ("ingest_gate", "ingest_gate.job", "jobkit")
"""The packages the job's executors import: the decoder (`ingest_gate.job.decode`), the packages
it sits in, and what it imports. They go with the job as a zip (`jobkit.executors.py_files`)."""
