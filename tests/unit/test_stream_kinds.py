"""A stream kind is one module: the pieces every kind shares are defined once (the AWS
error reading, SHARD_END), and a new kind is one module."""

from __future__ import annotations

import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from botocore.exceptions import ClientError
from pydantic import ValidationError

from streamconsumer.controller.aws.access import AccessPolicy
from streamconsumer.controller.consumer import driver
from streamconsumer.controller.leases.lease_coordinator import LeaseCoordinator
from streamconsumer.controller.leases.state import DurableState
from streamconsumer.core import lineage
from streamconsumer.core.lineage import SHARD_END
from streamconsumer.crd import custom_resource_definition, structural_schema
from streamconsumer.models.api import CheckpointRequest, HeartbeatRequest, HeldShard
from streamconsumer.models.base import Model
from streamconsumer.models.source import at_timestamp_rules, source_model
from streamconsumer.sources import registry
from streamconsumer.sources.aws import AwsError, aws_error
from streamconsumer.sources.base import ShardReader
from streamconsumer.sources.factory import make_source, source_settings
from streamconsumer.worker.config import WorkerConfig
from streamconsumer.worker.source import worker_source
from testbed.specs import consumer_spec, worker_config

from . import memory_kind
from .moments import CREATED

NO_ENDPOINT = {"region": None, "endpoint_url": None}
PACKAGE = Path(lineage.__file__).resolve().parents[1]


def sources_of_the_package() -> dict[str, str]:
    return {str(path.relative_to(PACKAGE)): path.read_text() for path in PACKAGE.rglob("*.py")}


def test_an_aws_error_is_read_in_one_place() -> None:
    readers = [
        name
        for name, text in sources_of_the_package().items()
        if re.search(r"""\.response\.get\(\s*["']Error["']|\.response\[["']Error["']\]""", text)
    ]
    assert readers == ["sources/aws.py"]


def test_aws_error_reads_a_service_error_and_anything_else() -> None:
    error = ClientError({"Error": {"Code": "Throttled", "Message": "slow down"}}, "GetRecords")
    assert aws_error(error) == AwsError("Throttled", "slow down")
    assert aws_error(ClientError({}, "GetRecords")).code == ""
    assert aws_error(TimeoutError("read timed out")) == AwsError("", "read timed out")


def test_shard_end_is_defined_once() -> None:
    defining = [
        name
        for name, text in sources_of_the_package().items()
        if re.search(r"^SHARD_END\s*(:[^=]*)?=", text, re.MULTILINE)
    ]
    assert defining == ["shard_end.py"]
    from streamconsumer.models.api import SHARD_END as from_the_wire
    from streamconsumer.processor import SHARD_END as for_processors

    assert from_the_wire == for_processors == lineage.SHARD_END == "SHARD_END"


# --- a new kind: one module, nothing else ----------------------------------------------------


@pytest.fixture
def registered(monkeypatch: pytest.MonkeyPatch) -> Iterator[type[Model]]:
    """The toy kind in the registry (as a module of `sources/kinds/` would be), and the
    `spec.source` model the registry makes with it."""
    monkeypatch.setitem(registry.KINDS, memory_kind.KIND.name, memory_kind.KIND)
    memory_kind.STREAMS["orders"] = {
        "s0": memory_kind.MemoryShard(records=[b"a0", b"a1"], closed=True),
        "s1": memory_kind.MemoryShard(parents=("s0",), records=[b"b0", b"b1", b"b2"]),
    }
    yield source_model(registry.KINDS.values())
    memory_kind.STREAMS.clear()


def test_the_crd_takes_a_new_kind_from_the_registry(registered: type[Model]) -> None:
    """`spec.source` gains the kind's field, and the CEL rules name it: exactly one kind,
    the kind stays, and no AT_TIMESTAMP start for a kind without that iterator."""
    schema = structural_schema(registered)
    assert schema["properties"]["memory"]["properties"]["streamName"]["minLength"] == 1
    rules = {rule["rule"]: rule["message"] for rule in schema["x-kubernetes-validations"]}
    assert rules[
        "[has(self.dynamodbStreams), has(self.kinesis), has(self.memory)].exists_one(x, x)"
    ] == ("set exactly one source: source.dynamodbStreams or source.kinesis or source.memory")
    assert "has(self.memory) == has(oldSelf.memory)" in "".join(rules)
    refused = dict(at_timestamp_rules(registry.KINDS.values()))
    assert refused["!has(self.source.memory) || self.initialPosition != 'AT_TIMESTAMP'"] == (
        "Memory has no AT_TIMESTAMP iterator: use TRIM_HORIZON or LATEST"
    )
    with pytest.raises(ValidationError, match="set exactly one source"):
        registered.model_validate({"memory": {"streamName": "a"}, "kinesis": {"streamName": "b"}})


def test_the_committed_crd_is_the_registrys() -> None:
    """What the test above builds is what `make crds` writes: `spec.source` and its rules
    come from the registry, nothing else."""
    spec = custom_resource_definition()["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    written = spec["properties"]["spec"]
    assert written["properties"]["source"] == structural_schema(
        source_model(registry.KINDS.values())
    )
    spec_rules = [rule["rule"] for rule in written["x-kubernetes-validations"]]
    assert [rule for rule, _ in at_timestamp_rules(registry.KINDS.values())] == [
        rule for rule in spec_rules if "self.source." in rule
    ]


def test_the_access_policy_takes_a_new_kinds_names_and_hosts(registered: type[Model]) -> None:
    policy = AccessPolicy.model_validate({"namespaces": {"team": {"streams": ["orders"]}}})

    def refusal(**spec: str) -> str | None:
        return policy.refusal("team", registered.model_validate({"memory": spec}))

    assert refusal(streamName="orders") is None
    assert refusal(streamName="payments") == "queue payments is not one namespace team may read"
    assert (
        refusal(streamName="orders", endpointURL="https://memory.eu-west-1.amazonaws.com") is None
    )
    kinesis_host = refusal(
        streamName="orders", endpointURL="https://kinesis.eu-west-1.amazonaws.com"
    )
    assert (
        kinesis_host
        == "endpoint host kinesis.eu-west-1.amazonaws.com is not one namespace team may use"
    )
    unconfigured = AccessPolicy().refusal(
        "team", registered.model_validate({"memory": {"streamName": "orders"}})
    )
    assert unconfigured is not None
    assert '{"streams": ["orders"]}' in unconfigured


def test_a_consumer_runs_on_a_kind_of_one_module(
    registered: type[Model], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The operator lists the new kind's shards and writes its worker settings, in
    variables of their own; a worker configured from that environment reads through the
    kind's reader; the lease engine runs them, parents first, checkpoints to the end."""
    source_spec = registered.model_validate({"memory": {"streamName": "orders"}})
    lister = make_source(source_spec)  # the operator's lister path
    settings = source_settings(source_spec)
    assert settings == {"source": "memory", "memory_stream": "orders", **NO_ENDPOINT}
    config = worker_config(namespace="team", consumer="orders", **settings, max_records=2)
    env = config.to_env()
    assert env["STREAMCONSUMER_MEMORY_STREAM"] == "orders"
    for name, value in env.items():  # through the pod's environment
        monkeypatch.setenv(name, value)
    read = WorkerConfig.from_env()
    assert read.source_settings == {"memory_stream": "orders"}
    worker = worker_source(read)  # the worker's reader path
    assert isinstance(worker, memory_kind.MemorySource)

    spec = consumer_spec(
        source={"kinesis": {"streamName": "unused"}},  # the coordinator never reads it
        initialPosition="TRIM_HORIZON",
    )
    coordinator = LeaseCoordinator(spec, DurableState(), now=0.0, created=CREATED)
    processed: list[bytes] = []
    readers: dict[str, ShardReader] = {}
    for step in range(1, 20):
        now = float(step)
        coordinator.set_shards(lister.list_shards())
        coordinator.step(now)
        coordinator.persisted(coordinator.snapshot(now), coordinator.version)  # durable
        held = [HeldShard(shard_id=sid, epoch=1) for sid in readers]
        answer = coordinator.heartbeat(HeartbeatRequest(worker="w", held=held), now)
        for assignment in answer.assignments:
            readers[assignment.shard_id] = worker.open_reader(assignment.shard_id, assignment.start)
        for shard_id, reader in list(readers.items()):
            result = reader.read()
            processed += [record.data for record in result.records]
            done = SHARD_END if result.shard_end else None
            last = result.records[-1].checkpoint_sequence if result.records else None
            if done or last:
                coordinator.checkpoint(
                    CheckpointRequest(
                        worker="w", shard_id=shard_id, epoch=1, sequence_number=done or last
                    )
                )
            if done:
                del readers[shard_id]
    assert processed == [b"a0", b"a1", b"b0", b"b1", b"b2"], "parents first, all of it"
    assert lister.backlog("s1", coordinator.start_of("s1")) is None, "caught up"


def test_an_unknown_kind_is_refused_clearly() -> None:
    with pytest.raises(ValidationError, match="unknown kind of source 'memory'"):
        worker_config(namespace="team", consumer="orders", source="memory")
    with pytest.raises(ValueError, match="unknown kind of source 'memory'"):
        make_source(
            source_model([*registry.KINDS.values(), memory_kind.KIND]).model_validate(
                {"memory": {"streamName": "orders"}}
            )
        )


def test_the_sources_import_nothing_from_the_worker_or_the_operator() -> None:
    upward = [
        name
        for name, text in sources_of_the_package().items()
        if name.startswith("sources/")
        and re.search(r"^\s*(from|import) streamconsumer\.(worker|controller)", text, re.M)
    ]
    assert upward == []


def test_a_failed_listing_says_what_the_kinds_error_means() -> None:
    """Degraded and the Event carry AWS's code and message, and the kind's advice."""
    denied = ClientError(
        {"Error": {"Code": "AccessDeniedException", "Message": "not authorized"}}, "ListStreams"
    )
    advice = registry.kind_named("dynamodbStreams").errors
    said = driver.failure(denied, "listing shards", 10.0, advice)
    assert said.startswith("listing shards: AccessDeniedException: not authorized (")
    assert "dynamodb:ListStreams" in said
    throttled = ClientError({"Error": {"Code": "Throttled", "Message": "slow"}}, "ListShards")
    assert driver.failure(throttled, "listing shards", 10.0, advice) == (
        "listing shards: Throttled: slow"
    )
    assert driver.failure(TimeoutError(), "listing shards", 10.0) == (
        "listing shards timed out after 10s"
    )


def test_the_security_page_names_every_kinds_iam_actions() -> None:
    """A kind's IAM actions are declared once, in its module; the policy an admin copies
    from docs/security.md must grant them."""
    page = (PACKAGE.parents[1] / "docs" / "security.md").read_text(encoding="utf-8")
    missing = [
        action
        for kind in registry.KINDS.values()
        if kind.access is not None
        for action in kind.access.actions
        if f'"{action}"' not in page
    ]
    assert missing == []


def test_the_models_and_the_crd_import_no_aws_library() -> None:
    """The kinds' declarations import their readers only when a stream is read: the CRD
    and every user of the models (the CLI installs no boto3) go without them."""
    probe = (
        "import sys, streamconsumer.crd, streamconsumer.sources.registry; "
        "print(sorted(m for m in sys.modules if m.split('.')[0] in ('boto3', 'botocore')))"
    )
    loaded = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, check=True
    ).stdout
    assert loaded.strip() == "[]"
