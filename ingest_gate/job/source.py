"""The streaming sources: a landing folder of JSON-lines files, or a Kafka topic.

    read_stream(spark, config)     # columns: raw, _source_file, _source_pos
    kafka_reader_options(config)   # the options handed to spark.readStream.format("kafka")
    count_files(spark, config)     # files in the landing folder that `file_pattern` matches

The landing folder's files are read in the order of their modification times, and the records
of one micro-batch are ordered by file name, then line: name files so that names sort in the
order they were written (a sequence number, a timestamp), as the change-stream formats need.

Both give one raw record per row in `raw` plus where it was read (ORDER_COLUMNS), which breaks
ties between versions of a key with equal event time (see ingest_gate.job.changes).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

from ingest_gate.job.changes import ORDER_COLUMNS, RAW_COLUMN

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

    from ingest_gate.job.config import IngestConfig

__all__ = [
    "KAFKA_DEFAULTS",
    "count_files",
    "file_reader_options",
    "kafka_reader_options",
    "read_stream",
    "with_source_position",
]

KAFKA_DEFAULTS = {
    # a first start reads what the topic still retains instead of skipping it
    "startingOffsets": "earliest",
    # offsets that vanished before they were read are lost events: stop rather than skip them
    "failOnDataLoss": "true",
}


def kafka_reader_options(config: IngestConfig) -> dict[str, str]:
    """KAFKA_DEFAULTS overridden by `config.kafka`, passed through as given.

    Needs Spark's Kafka source (`spark-sql-kafka-0-10`): a job Python starts fetches it with
    Maven (jobkit.maven); under spark-submit it comes with `--packages`.
    """
    return {**KAFKA_DEFAULTS, **dict(config.kafka)}


def file_reader_options(config: IngestConfig) -> dict[str, str]:
    """Options of the text source over the landing folder."""
    options = {
        # only finished files: writers put a file under a hidden temp name, then rename it
        "pathGlobFilter": config.file_pattern,
    }
    if config.max_files_per_trigger is not None:
        options["maxFilesPerTrigger"] = str(config.max_files_per_trigger)
    return options


def count_files(spark: SparkSession, config: IngestConfig) -> int:
    """How many files in the landing folder `file_pattern` matches now (hidden names, which
    the file source skips, not counted), through Hadoop's file system: any URI the source
    reads.

    Raises:
        py4j.protocol.Py4JJavaError: the folder cannot be listed.
    """
    jvm = spark._jvm
    folder = jvm.org.apache.hadoop.fs.Path(config.landing_path)
    fs = folder.getFileSystem(spark._jsc.hadoopConfiguration())
    found = fs.globStatus(jvm.org.apache.hadoop.fs.Path(folder, config.file_pattern)) or []
    return sum(
        1
        for status in found
        if status.isFile() and not status.getPath().getName().startswith((".", "_"))
    )


def read_stream(
    spark: SparkSession, config: IngestConfig, *, kafka_options: Mapping[str, str] | None = None
) -> DataFrame:
    """The configured source as a streaming DataFrame of raw records; `kafka_options` replaces
    `kafka_reader_options(config)` (the job's retention check may change one).

    Raises:
        pyspark.errors.PySparkException: the source cannot be set up (e.g. no Kafka package).
    """
    from pyspark.sql import functions as F

    file_col, pos_col = ORDER_COLUMNS
    if config.source == "kafka":
        return (
            spark.readStream.format("kafka")
            .options(**(kafka_options or kafka_reader_options(config)))
            .load()
            .select(
                F.col("value").cast("string").alias(RAW_COLUMN),
                F.concat_ws(":", "topic", F.col("partition").cast("string")).alias(file_col),
                F.col("offset").alias(pos_col),
            )
        )
    return (
        spark.readStream.format("text")
        .options(**file_reader_options(config))
        .load(config.landing_path)
        .select(
            F.col("value").alias(RAW_COLUMN),
            # file names sort in write order (see demo.generate); the position within a
            # file is added per batch (with_source_position): streaming plans refuse row ids
            F.input_file_name().alias(file_col),
        )
    )


def with_source_position(batch: DataFrame) -> DataFrame:
    """`batch` with both ORDER_COLUMNS: `_source_pos` when the source gave none (the file
    source), `_source_file` null when there was none (a batch built by hand).

    The id increases with the row order of each partition, and a small file is read by one
    partition in line order, so among the rows of one file a later line gets a larger id.
    """
    from pyspark.sql import functions as F

    file_col, pos_col = ORDER_COLUMNS
    if file_col not in batch.columns:
        batch = batch.withColumn(file_col, F.lit(None).cast("string"))
    if pos_col not in batch.columns:
        batch = batch.withColumn(pos_col, F.monotonically_increasing_id())
    return batch
