"""Equality deletes as a Flink upsert writes them (one file of key rows, committed alone as a
row delta), written in a Spark session by Iceberg's own generic Java writer, for the tests and
the benchmark of compactor.convert.

    delete_equal(spark, "local.db.t", {"dt": "d0"}, ["id", "dt"], [(0, "d0"), (2, "d0")])
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from jobkit.spark import load_table

__all__ = ["delete_equal"]


def delete_equal(
    spark: Any,
    table: str,
    partition: Mapping[str, Any],
    columns: Sequence[str],
    keys: Iterable[Sequence[Any]],
) -> int:
    """Commit one equality delete file on `columns` holding `keys` (one value per column,
    None for null) in `partition` (its values by partition field name, identity transforms),
    and refresh Spark's view of `table`; the number of keys written. Values cross py4j as
    Python gives them: an int column takes ints, not bigint values below 2**31."""
    jvm = spark._jvm
    iceberg = jvm.org.apache.iceberg
    jtable = load_table(spark, table)
    schema, spec = jtable.schema(), jtable.spec()
    fields = spark.sparkContext._gateway.new_array(jvm.int, len(columns))
    for i, name in enumerate(columns):
        fields[i] = schema.findField(name).fieldId()
    projection = schema.select(list(columns))
    factory = iceberg.data.GenericAppenderFactory(schema, spec, fields, projection, None)
    where = iceberg.data.GenericRecord.create(spec.partitionType())
    for i, field in enumerate(spec.fields()):
        where.set(i, partition[field.name()])
    location = jtable.locationProvider().newDataLocation(spec, where, f"eq-{uuid.uuid4()}.parquet")
    output = iceberg.encryption.EncryptedFiles.plainAsEncryptedOutput(
        jtable.io().newOutputFile(location)
    )
    writer = factory.newEqDeleteWriter(output, iceberg.FileFormat.PARQUET, where)
    count = 0
    try:
        for key in keys:
            record = iceberg.data.GenericRecord.create(projection)
            for name, value in zip(columns, key, strict=True):
                record.setField(name, value)
            writer.write(record)
            count += 1
    finally:
        writer.close()
    jtable.newRowDelta().addDeletes(writer.toDeleteFile()).commit()
    spark.sql(f"REFRESH TABLE {table}")
    return count
