"""A Flink SQL writer that never calls lakelock: an upsert or append job into an Iceberg table
through lakelock's catalog front (docs/catalog-front.md, "Flink writers").

It runs in a Python of its own, with PyFlink (`apache-flink`) installed, whose pinned NumPy and
PyArrow are not lakelock's: `jobkit.flink` makes that interpreter and starts the job in it. So
this package imports only the standard library and PyFlink, and nothing on import.
"""
