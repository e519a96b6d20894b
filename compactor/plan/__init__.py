"""Decide whether a table needs maintenance, and which procedures to run: pure functions of the
table's stats, its config and the clock (docs/design.md §4, docs/jobs.md §2 and §3).

    p = plan(stats, table_config, now, leased={"dt=2024-05-10"})  # stats: collect_stats
    p.run                                  # False: skip, take no lease (ingest keeps going)
    p.reasons                              # why, with the numbers and the thresholds
    p.groups                               # Group(partitions, steps): one lease each, in order
    p.unleased                             # expire_snapshots, remove_orphan_files: no lease
    p.steps                                # every step, in order
    print(p.describe())

compactor.plan.model     Plan, Group, Step, PartitionPlan, Mode: what a plan says
compactor.plan.planner   plan(): one lease on the whole table, or one per group of partitions
compactor.plan.scope     what a plan looks at: rewrite-all, the recent partitions, or all
compactor.plan.rules     due, hot, past the hard bound, most debt first; when a run pays off
compactor.plan.steps     the procedure calls, each only when enabled and with work
compactor.plan.expiry    which snapshots expire_snapshots may remove
compactor.plan.names     a partition's values read back from its name (the follower's filter)
compactor.plan.follow    the follower's plan: the due partitions the service names, grouped
"""

from compactor.plan.expiry import ExpiryPlan, snapshot_expiry
from compactor.plan.model import DATA_STEPS, Group, Mode, PartitionPlan, Plan, Step
from compactor.plan.names import partition_mapping, partition_values
from compactor.plan.planner import plan
from compactor.plan.rules import over_bound
from compactor.plan.scope import full_rewrite_due, recent_where, scope_of
from compactor.plan.steps import REMOVE_DANGLING, follow_steps

__all__ = [
    "DATA_STEPS",
    "REMOVE_DANGLING",
    "ExpiryPlan",
    "Group",
    "Mode",
    "PartitionPlan",
    "Plan",
    "Step",
    "follow_steps",
    "full_rewrite_due",
    "over_bound",
    "partition_mapping",
    "partition_values",
    "plan",
    "recent_where",
    "scope_of",
    "snapshot_expiry",
]
