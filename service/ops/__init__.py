"""The operators' tools (`pip install 'lakelock[ops]'`; kept out of the service image).

service.ops.cli             `lakelock`: status, pause, resume, revoke, runs, audit
service.ops.output          what the commands print: one Output, on a console or as JSON
service.ops.layout          rows for a terminal of any width
service.ops.iceberg_audit   every commit inside its lease, proven from Iceberg's history
"""
