"""The maintenance side of lakelock: plan, take the maintenance lease, run Iceberg procedures.

compactor.config     CompactorConfig / TableConfig, loaded from TOML; retention floors
compactor.stats      TableStats from the table's metadata tables (the one Spark read)
compactor.plan       plan(stats, config, now): what to run and why; pure
compactor.lease      the maintenance lease, waiting through the drain
compactor.procedure  the Iceberg actions, with lakelock's snapshot properties
compactor.report     RunReport: one JSON line, and the service's run history
compactor.run        run_table(): one table, one run, every path releasing the lease;
                     follow_table(): the partitions the service says are due, no plan
compactor.patterns   table names and shell-style patterns; pure
compactor.catalog    table names and snapshot summaries from the catalog, without a Spark job
compactor.rank       which tables a tick plans, in which order; pure
compactor.claim      the claim held on a table from before its plan to after its housekeeping
compactor.debt       the debt a plan or run saw, reported to the service
compactor.fleet      Fleet: list, rank, claim, run a few tables at once, tick after tick
compactor.follow     Follower: long-polls for due partitions, compacts them at once; the fleet's
                     ticks on a slower grid beside
compactor.job        main(): wiring, `--once`, the scheduled mode and `--follow`
"""
