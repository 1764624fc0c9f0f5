"""`python -m streamconsumer.worker`: configured by STREAMCONSUMER_* environment."""

from __future__ import annotations

import logging
import os
import signal
import ssl
import sys

from streamconsumer.deadletter import writer_for
from streamconsumer.loading import load_processor
from streamconsumer.models.pod_policy import LOG_LEVEL_ENV
from streamconsumer.processor import warm_up
from streamconsumer.worker import metrics
from streamconsumer.worker.client import OperatorClient
from streamconsumer.worker.config import WorkerConfig
from streamconsumer.worker.processes import supervise
from streamconsumer.worker.runtime import EXIT_CALL_STUCK, Worker
from streamconsumer.worker.source import worker_source

# Libraries whose INFO lines would drown the processor's (credentials found, each
# connection opened): they log at WARNING whatever the processor's level.
QUIET_LIBRARIES = ("botocore", "boto3", "s3transfer", "urllib3", "httpx", "httpcore", "py4j")


def configure_logging(worker_level: str, processor_level: str) -> None:
    """The processor's own loggers (any outside ours) at `spec.processor.logLevel`; the
    worker's (`streamconsumer`) at STREAMCONSUMER_LOG_LEVEL; the SDKs' at WARNING."""
    logging.basicConfig(
        level=processor_level,
        format="%(asctime)s level=%(levelname)s logger=%(name)s %(message)s",
        force=True,
    )
    logging.getLogger("streamconsumer").setLevel(worker_level.upper())
    for library in QUIET_LIBRARIES:
        logging.getLogger(library).setLevel(logging.WARNING)


def main() -> None:
    worker_level = os.environ.get(LOG_LEVEL_ENV, "WARNING")
    configure_logging(worker_level, "WARNING")  # until the settings are read
    config = WorkerConfig.from_env()
    configure_logging(worker_level, config.processor_log_level)
    if config.processes > 1:  # a supervisor over that many workers of one process each
        sys.exit(supervise(config))
    metrics.serve(config.metrics_port, config.metrics_address)
    try:
        factory = load_processor(config.entrypoint)
    except ValueError as error:
        sys.exit(f"worker: {error}")
    try:
        warm_up(factory)
    except Exception as error:  # a broken environment (no Java, a bad path): say so and stop
        sys.exit(f"worker: processor warm-up failed: {error}")
    try:
        source = worker_source(config)
    except ValueError as error:
        sys.exit(f"worker: bad source configuration: {error}")
    try:
        operator = OperatorClient(
            config.operator_url,
            config.namespace,
            config.consumer,
            config.token_path,
            ca_path=config.ca_path,
        )
    except (OSError, ssl.SSLError) as error:
        sys.exit(f"worker: cannot read the operator's CA {config.ca_path}: {error}")
    target = config.on_failure.dead_letter
    dead_letters = writer_for(target) if target is not None else None
    worker = Worker(config, operator, source, factory, dead_letters)
    signal.signal(signal.SIGTERM, worker.drain)
    signal.signal(signal.SIGINT, worker.drain)
    status = worker.run()
    if status == EXIT_CALL_STUCK:  # a processor call still runs: do not wait for anything
        logging.shutdown()
        os._exit(status)
    sys.exit(status)


if __name__ == "__main__":
    main()
