"""What the tests share: the service in-process and as a process, databases, fuzzing, the
invariants checker of the audit trail, Iceberg commits by hand, a TCP proxy, the time budget."""
