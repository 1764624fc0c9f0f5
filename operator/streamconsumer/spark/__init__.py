"""Records to a PySpark pipeline without breaking the KCL contract: a shard's checkpoint
moves only after the pipeline's output is committed. Install `streamconsumer[spark]`, or
`streamconsumer[bronze]` for JVM-free workers that land batches for a Spark job."""

from streamconsumer.spark.batching import BatchInfo, BatchingProcessor
from streamconsumer.spark.bronze import BronzeProcessor
from streamconsumer.spark.processor import SparkBatchProcessor, Transform
from streamconsumer.spark.sinks import (
    DeltaChangesSink,
    DeltaMergeSink,
    DeltaSink,
    ForeachBatchSink,
    ParquetSink,
    Sink,
)

__all__ = [
    "BatchInfo",
    "BatchingProcessor",
    "BronzeProcessor",
    "DeltaChangesSink",
    "DeltaMergeSink",
    "DeltaSink",
    "ForeachBatchSink",
    "ParquetSink",
    "Sink",
    "SparkBatchProcessor",
    "Transform",
]
