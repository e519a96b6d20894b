"""What both Spark jobs (ingest_gate, compactor) share (`pip install 'lakelock[spark]'`).

    jobkit.spark       the Spark session with Iceberg and a catalog, job groups, error lines
    jobkit.partition   partition specs and names (Iceberg partition paths), one builder for both
    jobkit.predicate   SQL predicates that select exactly a set of partitions
    jobkit.sql         identifier quoting
    jobkit.token       the jobs' bearer token (LAKELOCK_TOKEN)
    jobkit.config      TOML config files: durations, layering, one error per bad value

The ingest job's record decoder, the one piece of Python its executors run, imports from here
too: `python -m lakelock_submit py-files` zips both packages.
"""
