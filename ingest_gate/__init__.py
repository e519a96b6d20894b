"""The ingest gate, and the streaming ingest job that uses it (docs/design.md §2, §3.2).

    from ingest_gate.gate import Gate
    gate = Gate(client, holder=f"ingest:{query_id}")
    with gate.commit("cat.db.events", partitions=["dt=2024-06-20/hr=13"]) as gate_pass:
        gate_pass.check()            # right before the MERGE
        run_merge(batch)

ingest_gate.gate   Gate: the commit lease a batch holds from before its read to its commit; it
                   needs service.client alone
ingest_gate.job    the Structured Streaming job (`python -m ingest_gate`, `lakelock-ingest`)

This package imports nothing itself: the executors import it on their way to the job's decoder
(ingest_gate.job.decode), and they have neither httpx nor pydantic.
"""
