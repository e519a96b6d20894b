"""The streaming ingest job and its gate (docs/design.md §3.2, §6, §7).

ingest_gate.job      run(config): the Structured Streaming query, one MERGE per micro-batch
ingest_gate.gate     Gate: the commit lease a batch holds from before its read to its commit
ingest_gate.decode   records of any format against the target table's schema (executors)
"""

EXECUTOR_PACKAGES = ("ingest_gate", "jobkit")
"""The packages the job's executors import: the decoder (`ingest_gate.decode`) and what it
imports. They go with the job as a zip (`jobkit.executors.py_files`)."""
