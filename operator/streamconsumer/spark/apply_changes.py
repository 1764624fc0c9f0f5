"""The apply job: MERGEs a change log into its mirror table, as the mirror's only writer.

The log is what DeltaChangesSink lands from every shard; with one writer, no commit of
the mirror races another.

A Structured Streaming job over the change log's Delta table: each micro-batch is MERGEd
with Merge (per key, the change with the highest order wins), and Spark's checkpoint
re-runs a failed micro-batch with the same changes, which the MERGE makes harmless. Run it
once after landing (`--once`) or continuously; on Spark Connect, or as a cluster driver.

    python -m streamconsumer.spark.apply_changes --changes /data/changes \\
        --mirror /data/mirror --checkpoint /data/checkpoints/mirror --key key --order sequence
"""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

from streamconsumer.spark.session import delta_conf, ship_by_value, spark_session
from streamconsumer.spark.sinks import BATCH_COLUMNS, Merge
from streamconsumer.spark.streaming_job import (
    add_trigger_arguments,
    basic_logging,
    run_to_end,
    triggered,
)

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession
    from pyspark.sql.streaming.query import StreamingQuery


INTERVAL = "10 seconds"  # between micro-batches, unless --once


def start(
    spark: SparkSession,
    changes: str,
    merge: Merge,
    checkpoint: str,
    once: bool = True,
    interval: str = INTERVAL,
) -> StreamingQuery:
    """Starts the job; with `once`, it applies what is landed now and stops."""
    ship_by_value(spark, __name__)

    created = False

    def apply(df: DataFrame, batch_id: int) -> None:
        nonlocal created
        landed = df.drop(*BATCH_COLUMNS)  # DeltaChangesSink's, not the mirror's
        if not created:  # the mirror, with the changes' schema, once per run
            merge.create(landed)
            created = True
        merge.apply(landed)

    # The log is only ever appended to; a commit that removes rows is the retention's
    # DELETE of changes already applied, never one to apply.
    stream = spark.readStream.format("delta").option("skipChangeCommits", "true").load(changes)
    writer = stream.writeStream.foreachBatch(apply).option("checkpointLocation", checkpoint)
    return triggered(writer, once, interval).start()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--changes", required=True, help="the change log the workers land")
    parser.add_argument("--mirror", required=True, help="the Delta table to keep up to date")
    parser.add_argument("--checkpoint", required=True, help="the job's own checkpoint")
    parser.add_argument("--key", default="key", help="the column naming a row (default: key)")
    parser.add_argument(
        "--order", default="sequence", help="the column ordering its changes (default: sequence)"
    )
    add_trigger_arguments(parser, interval=INTERVAL)
    args = parser.parse_args(argv)
    basic_logging()
    try:
        merge = Merge(args.mirror, args.key, args.order)
    except ValueError as error:
        parser.error(str(error))
    session = spark_session(delta_conf)
    query = start(session, args.changes, merge, args.checkpoint, args.once, args.interval)
    run_to_end(query)


if __name__ == "__main__":
    main()
