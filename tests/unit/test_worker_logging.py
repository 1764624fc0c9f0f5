"""The worker's log levels (issue 27): the processor's logger.info lines disappeared under
the worker's WARNING; now they show at `spec.processor.logLevel` (INFO by default), while
the worker's own and the AWS SDK's stay quiet."""

from __future__ import annotations

import subprocess
import sys

from streamconsumer.controller.worker_api.auth import AUDIENCE
from streamconsumer.controller.workloads.children import deployment
from streamconsumer.worker.config import WorkerConfig
from testbed.specs import consumer_spec


def logged(worker_level: str, processor_level: str) -> str:
    code = (
        "import logging;"
        "from streamconsumer.worker.__main__ import configure_logging;"
        f"configure_logging({worker_level!r}, {processor_level!r});"
        "logging.getLogger('team.processor').info('processor info');"
        "logging.getLogger('team.processor').debug('processor debug');"
        "logging.getLogger('streamconsumer.worker.runtime').info('worker info');"
        "logging.getLogger('streamconsumer.worker.runtime').warning('worker warning');"
        "logging.getLogger('botocore.credentials').info('Found credentials');"
    )
    ran = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True
    )
    return ran.stderr


def test_the_processors_info_shows_and_the_rest_stays_quiet() -> None:
    out = logged("WARNING", "INFO")
    assert "processor info" in out
    assert "processor debug" not in out
    assert "worker warning" in out
    assert "worker info" not in out
    assert "Found credentials" not in out


def test_each_level_is_its_own() -> None:
    out = logged("INFO", "DEBUG")
    assert "processor debug" in out
    assert "worker info" in out
    assert "Found credentials" not in out, "the SDKs stay at WARNING"
    assert "processor info" not in logged("WARNING", "WARNING")


def env_of(**processor: str) -> dict[str, str]:
    spec = consumer_spec(processor={"image": "i", "entrypoint": "m:P", **processor})
    manifest = deployment("ns", "c", spec, "http://op:8080", AUDIENCE)
    (container,) = manifest["spec"]["template"]["spec"]["containers"]
    return {e["name"]: e.get("value", "") for e in container["env"]}


def test_the_level_reaches_the_worker_and_the_default_leaves_the_template_as_it_was() -> None:
    name = WorkerConfig.env_name("processor_log_level")
    assert name not in env_of(), "an upgrade must not roll every consumer's workers"
    assert env_of(logLevel="DEBUG")[name] == "DEBUG"
    read = WorkerConfig.model_validate({**env_settings(), "processor_log_level": "DEBUG"})
    assert read.processor_log_level == "DEBUG"


def env_settings() -> dict[str, str]:
    return {
        "operator_url": "http://op:8080",
        "namespace": "ns",
        "consumer": "c",
        "worker_name": "w",
        "token_path": "/t",
        "entrypoint": "m:P",
    }
