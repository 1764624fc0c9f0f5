"""Records to a PySpark pipeline without breaking the KCL contract: a shard's checkpoint
moves only after the pipeline's output is committed. Install `streamconsumer[spark]`."""

from streamconsumer.spark.processor import BatchInfo, SparkBatchProcessor
from streamconsumer.spark.sinks import ForeachBatchSink, ParquetSink, Sink

__all__ = ["BatchInfo", "ForeachBatchSink", "ParquetSink", "Sink", "SparkBatchProcessor"]
