"""A bad StreamConsumer is refused at `kubectl apply` by the real apiserver, with a
message that says what to fix (the CEL rules and bounds come from the models)."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest

from testbed.controlplane import ControlPlane
from testbed.specs import consumer_manifest

VALID = consumer_manifest(entrypoint="clicks.processor:Counter")


def variant(**changes: Any) -> dict[str, Any]:
    """VALID with `spec` keys replaced (dotted paths: source.kinesis.streamARN)."""
    manifest = copy.deepcopy(VALID)
    for path, value in changes.items():
        node = manifest["spec"]
        *parents, leaf = path.split("__")
        for key in parents:
            node = node.setdefault(key, {})
        node[leaf] = value
    return manifest


ARN = "arn:aws:kinesis:eu-west-1:123456789012:stream/clicks"
TABLE_STREAM_ARN = (
    "arn:aws:dynamodb:eu-west-1:123456789012:table/orders/stream/2026-11-01T00:00:00.000"
)
DYNAMODB = {"dynamodbStreams": {"tableName": "orders", "region": "eu-west-1"}}
ONE_SOURCE = "set exactly one source: source.dynamodbStreams or source.kinesis"
SQS = "https://sqs.eu-west-1.amazonaws.com/123456789012/clicks-dlq"

REFUSED = [
    pytest.param(
        variant(
            source__kinesis__endpointURL="https://127.0.0.1:8443\\@kinesis.us-east-1.amazonaws.com"
        ),
        "spec.source.kinesis.endpointURL",
        id="endpoint-url-with-a-backslash",
    ),
    pytest.param(
        variant(source__kinesis__streamARN=ARN),
        "set exactly one of source.kinesis.streamName and source.kinesis.streamARN",
        id="name-and-arn",
    ),
    pytest.param(
        variant(source={"kinesis": {"region": "eu-west-1"}}),
        "set exactly one of source.kinesis.streamName and source.kinesis.streamARN",
        id="neither-name-nor-arn",
    ),
    pytest.param(
        variant(initialPosition="AT_TIMESTAMP"),
        "initialPosition AT_TIMESTAMP needs initialTimestamp",
        id="at-timestamp-without-timestamp",
    ),
    pytest.param(
        variant(initialTimestamp="2026-01-01T00:00:00Z"),
        "initialTimestamp is only used with initialPosition AT_TIMESTAMP",
        id="timestamp-without-at-timestamp",
    ),
    pytest.param(
        variant(autoscaling={"minReplicas": 5, "maxReplicas": 2, "targetLagSeconds": 30}),
        "minReplicas must not exceed maxReplicas",
        id="min-above-max",
    ),
    pytest.param(
        variant(autoscaling={"maxReplicas": 4}),
        "spec.autoscaling.targetLagSeconds: Required value",
        id="autoscaling-without-target",
    ),
    pytest.param(
        variant(leases={"durationSeconds": 0}), "spec.leases.durationSeconds", id="zero-duration"
    ),
    pytest.param(
        variant(processor__entrypoint="clicks.processor"),
        "spec.processor.entrypoint",
        id="entrypoint-without-name",
    ),
    pytest.param(
        variant(initialPosition="EARLIEST"), 'supported values: "TRIM_HORIZON"', id="bad-position"
    ),
    pytest.param(variant(replicas=-1), "spec.replicas", id="negative-replicas"),
    pytest.param(
        variant(processor__parallelism=101),
        "spec.processor.parallelism: Invalid value: 101: spec.processor.parallelism in body "
        "should be less than or equal to 100",
        id="parallelism-over-100",
    ),
    pytest.param(
        variant(processor__parallelism=0), "spec.processor.parallelism", id="no-parallelism"
    ),
    pytest.param(
        variant(source={**VALID["spec"]["source"], **DYNAMODB}), ONE_SOURCE, id="two-sources"
    ),
    pytest.param(variant(source={}), ONE_SOURCE, id="no-source"),
    pytest.param(
        variant(source={"dynamodbStreams": {"region": "eu-west-1"}}),
        "set exactly one of source.dynamodbStreams.tableName and source.dynamodbStreams.streamARN",
        id="table-stream-without-table-or-arn",
    ),
    pytest.param(
        variant(source={"dynamodbStreams": {"tableName": "orders", "streamARN": TABLE_STREAM_ARN}}),
        "set exactly one of source.dynamodbStreams.tableName and source.dynamodbStreams.streamARN",
        id="table-and-stream-arn",
    ),
    pytest.param(
        variant(source={"dynamodbStreams": {"streamARN": ARN}}),
        "spec.source.dynamodbStreams.streamARN",
        id="kinesis-arn-as-table-stream",
    ),
    pytest.param(
        variant(
            source=DYNAMODB,
            initialPosition="AT_TIMESTAMP",
            initialTimestamp="2026-01-01T00:00:00Z",
        ),
        "DynamoDB Streams has no AT_TIMESTAMP iterator",
        id="table-stream-at-timestamp",
    ),
    pytest.param(
        variant(processor__onFailure={"then": "deadLetter"}),
        "deadLetter (the target) goes with then: deadLetter, and only with it",
        id="dead-letter-without-target",
    ),
    pytest.param(
        variant(processor__onFailure={"then": "skip", "deadLetter": {"sqs": {"queueURL": SQS}}}),
        "deadLetter (the target) goes with then: deadLetter, and only with it",
        id="target-without-dead-letter",
    ),
    pytest.param(
        variant(
            processor__onFailure={
                "then": "deadLetter",
                "deadLetter": {"sqs": {"queueURL": SQS}, "s3": {"bucket": "failures"}},
            }
        ),
        "set exactly one dead-letter target: kinesis, sqs or s3",
        id="two-targets",
    ),
    pytest.param(
        variant(
            processor__onFailure={
                "then": "deadLetter",
                "deadLetter": {"s3": {"bucket": "failures"}, "overflowS3": {"bucket": "large"}},
            }
        ),
        "overflowS3 goes with a kinesis or sqs target",
        id="overflow-of-s3",
    ),
    pytest.param(
        variant(processor__onFailure={"maxRecordAgeSeconds": 60}),
        "maxRecordAgeSeconds passes old records over: it goes with then: skip or deadLetter",
        id="record-age-under-block",
    ),
    pytest.param(
        variant(processor__onFailure={"then": "skip", "maxRecordAgeSeconds": 0}),
        "spec.processor.onFailure.maxRecordAgeSeconds: Invalid value",
        id="record-age-zero",
    ),
    pytest.param(
        variant(
            processor__filter={
                "patterns": [{"data": [{"path": "a", "equals": "x", "prefix": "y"}]}]
            }
        ),
        "set exactly one of equals, equalsAny, prefix and exists",
        id="filter-two-tests",
    ),
    pytest.param(
        variant(processor__filter={"patterns": [{"partitionKey": {}}]}),
        "set exactly one of equals, equalsAny, prefix and exists",
        id="filter-no-test",
    ),
    pytest.param(
        variant(processor__filter={"patterns": [{}]}),
        "a filter pattern needs partitionKey or data conditions",
        id="filter-empty-pattern",
    ),
    pytest.param(
        variant(processor__filter={"patterns": []}),
        "spec.processor.filter.patterns: Invalid value",
        id="filter-no-patterns",
    ),
    pytest.param(
        variant(processor__filter={"patterns": [{"data": [{"path": "a..b", "exists": True}]}]}),
        "spec.processor.filter.patterns[0].data[0].path",
        id="filter-bad-path",
    ),
    pytest.param(
        variant(processor__filter={"patterns": [{"data": [{"path": "a", "equals": 5}]}]}),
        "spec.processor.filter.patterns[0].data[0].equals",
        id="filter-not-a-string",
    ),
    pytest.param(
        variant(processor__onFailure={"then": "retry"}),
        'supported values: "block", "skip", "deadLetter"',
        id="bad-policy",
    ),
    pytest.param(
        variant(source__kinesis__consumer="fanout"),
        'spec.source.kinesis.consumer: Unsupported value: "fanout": supported values: '
        '"polling", "fanOut"',
        id="bad-consumer",
    ),
]


# Issue 24: a tenant's pod is no more than the pod they could run themselves.
PROCESSOR = dict(VALID["spec"]["processor"])
VOLUMES_REFUSED = "volumes may use only configMap, secret, emptyDir"
ROOT_REFUSED = "may not run the workers as root or with group 0"
RESERVED_ENV = (
    "env names STREAMCONSUMER_* (but STREAMCONSUMER_LOG_LEVEL, STREAMCONSUMER_SPARK_JARS or "
    "STREAMCONSUMER_SPARK_CONF) and POD_NAME are"
)
# Issue 40: a token or a certificate of the workers' ServiceAccount, an inline CSI volume.
TOKEN_REFUSED = "projected volumes may use only configMap, secret or downwardAPI sources"
KUBE_TOKEN = {"name": "kube", "projected": {"sources": [{"serviceAccountToken": {"path": "t"}}]}}
STS_TOKEN = {
    "name": "aws",
    "projected": {
        "sources": [
            {"configMap": {"name": "clicks"}},
            {"serviceAccountToken": {"audience": "sts.amazonaws.com", "path": "token"}},
        ]
    },
}
POD_CERTIFICATE = {
    "name": "cert",
    "projected": {
        "sources": [{"podCertificate": {"signerName": "example.com/s", "keyType": "ED25519"}}]
    },
}
INLINE_CSI = {"name": "vault", "csi": {"driver": "secrets-store.csi.k8s.io", "readOnly": True}}
TENANT_REFUSED = [
    pytest.param(variant(pod={"volumes": [KUBE_TOKEN]}), TOKEN_REFUSED, id="apiserver-token"),
    pytest.param(variant(pod={"volumes": [STS_TOKEN]}), TOKEN_REFUSED, id="sts-token"),
    pytest.param(variant(pod={"volumes": [POD_CERTIFICATE]}), TOKEN_REFUSED, id="certificate"),
    pytest.param(variant(pod={"volumes": [INLINE_CSI]}), VOLUMES_REFUSED, id="csi"),
    pytest.param(
        variant(pod={"volumes": [{"name": "sock", "hostPath": {"path": "/run/containerd"}}]}),
        VOLUMES_REFUSED,
        id="hostPath",
    ),
    pytest.param(  # and how an admin would lift it
        variant(pod={"volumes": [{"name": "sock", "hostPath": {"path": "/run/containerd"}}]}),
        "platform admins may allow spec.pod.unrestricted in a namespace",
        id="hostPath-names-the-way-out",
    ),
    pytest.param(
        variant(pod={"volumes": [{"name": "n", "nfs": {"server": "10.0.0.1", "path": "/"}}]}),
        VOLUMES_REFUSED,
        id="nfs",
    ),
    pytest.param(
        variant(pod={"securityContext": {"supplementalGroups": [1000, 0]}}),
        ROOT_REFUSED,
        id="group-0",
    ),
    pytest.param(variant(pod={"securityContext": {"fsGroup": 0}}), ROOT_REFUSED, id="fsGroup-0"),
    pytest.param(variant(pod={"securityContext": {"runAsUser": 0}}), ROOT_REFUSED, id="root"),
    pytest.param(
        variant(pod={"securityContext": {"runAsNonRoot": False}}), ROOT_REFUSED, id="may-be-root"
    ),
    pytest.param(
        variant(pod={"securityContext": {"seLinuxOptions": {"type": "spc_t"}}}),
        "seLinuxOptions may set only type, one of container_t",
        id="spc_t",
    ),
    pytest.param(
        variant(pod={"securityContext": {"appArmorProfile": {"type": "Unconfined"}}}),
        "may not make the workers Unconfined",
        id="apparmor-unconfined",
    ),
    pytest.param(
        variant(pod={"securityContext": {"seccompProfile": {"type": "Unconfined"}}}),
        "may not make the workers Unconfined",
        id="seccomp-unconfined",
    ),
    pytest.param(
        variant(pod={"securityContext": {"sysctls": [{"name": "kernel.msgmax", "value": "1"}]}}),
        "sysctls may set only kernel.shm_rmid_forced",
        id="unsafe-sysctl",
    ),
    pytest.param(
        variant(
            processor=PROCESSOR
            | {"env": [{"name": "STREAMCONSUMER_OPERATOR_URL", "value": "http://evil:80"}]}
        ),
        RESERVED_ENV,
        id="reserved-env",
    ),
    pytest.param(
        variant(processor=PROCESSOR | {"env": [{"name": "POD_NAME", "value": "other"}]}),
        RESERVED_ENV,
        id="pod-name-env",
    ),
    pytest.param(
        variant(
            processor=PROCESSOR
            | {"envFrom": [{"prefix": "STREAMCONSUMER_", "configMapRef": {"name": "x"}}]}
        ),
        "an envFrom prefix may not start with STREAMCONSUMER_",
        id="reserved-env-prefix",
    ),
]
REFUSED += TENANT_REFUSED
REFUSED += [
    pytest.param(
        variant(end={"timestamp": "2026-01-01T05:00:00Z", "atCreation": True}),
        "end needs exactly one of timestamp and atCreation: true",
        id="end-twice",
    ),
    pytest.param(
        variant(end={}), "end needs exactly one of timestamp and atCreation: true", id="end-none"
    ),
]


def apply(plane: ControlPlane, namespace: str, manifest: dict[str, Any]) -> tuple[int, str]:
    result = plane.kubectl("apply", "-n", namespace, "-f", "-", input=json.dumps(manifest))
    return result.returncode, result.stderr + result.stdout


@pytest.mark.parametrize(("manifest", "message"), REFUSED)
def test_bad_spec_is_refused_with_a_clear_message(
    control_plane: ControlPlane, namespace: str, manifest: dict[str, Any], message: str
) -> None:
    code, output = apply(control_plane, namespace, manifest)
    assert code != 0, output
    assert message in output, output
    assert "Traceback" not in output


def test_valid_specs_are_accepted(control_plane: ControlPlane, namespace: str) -> None:
    for index, manifest in enumerate(
        (
            VALID,
            variant(initialPosition="AT_TIMESTAMP", initialTimestamp="2026-01-01T00:00:00Z"),
            variant(source={"kinesis": {"streamARN": ARN}}),
            variant(source__kinesis__consumer="fanOut"),
            variant(source__kinesis__consumer="polling"),
            variant(autoscaling={"minReplicas": 1, "maxReplicas": 8, "targetLagSeconds": 30}),
            variant(source=DYNAMODB),
            variant(
                source={"dynamodbStreams": {"streamARN": TABLE_STREAM_ARN}},
                initialPosition="LATEST",
            ),
            variant(
                processor__onFailure={
                    "retries": 5,
                    "then": "deadLetter",
                    "deadLetter": {"s3": {"bucket": "failures", "prefix": "clicks/"}},
                },
                paused=True,
            ),
            variant(
                processor__onFailure={
                    "then": "deadLetter",
                    "deadLetter": {
                        "sqs": {"queueURL": SQS},
                        "overflowS3": {"bucket": "large-letters", "prefix": "clicks/"},
                    },
                }
            ),
            variant(  # what a tenant may ask for: the restricted standard's pod
                pod={
                    "volumes": [
                        {"name": "settings", "configMap": {"name": "clicks"}},
                        {"name": "cache", "emptyDir": {}},
                        {"name": "data", "persistentVolumeClaim": {"claimName": "clicks"}},
                        {
                            "name": "bundle",
                            "projected": {
                                "sources": [
                                    {"secret": {"name": "aws"}},
                                    {"configMap": {"name": "clicks"}},
                                    {
                                        "downwardAPI": {
                                            "items": [
                                                {
                                                    "path": "name",
                                                    "fieldRef": {"fieldPath": "metadata.name"},
                                                }
                                            ]
                                        }
                                    },
                                ]
                            },
                        },
                    ],
                    "securityContext": {
                        "runAsNonRoot": True,
                        "runAsUser": 1000,
                        "fsGroup": 2000,
                        "supplementalGroups": [3000],
                        "seLinuxOptions": {"type": "container_t"},
                        "seccompProfile": {"type": "RuntimeDefault"},
                        "sysctls": [{"name": "net.ipv4.tcp_keepalive_time", "value": "60"}],
                    },
                },
                processor=PROCESSOR
                | {
                    "env": [
                        {"name": "STREAMCONSUMER_LOG_LEVEL", "value": "INFO"},
                        {"name": "STREAMCONSUMER_SPARK_JARS", "value": "/opt/spark-jars"},
                    ],
                    "envFrom": [
                        {"secretRef": {"name": "aws"}},
                        {"prefix": "APP_", "configMapRef": {"name": "a"}},
                    ],
                },
            ),
            # Beyond the tenant limits: the CRD lets it be, the admins' list decides (the
            # admission policy and the operator: test_admission_policy, test_tenant_isolation).
            variant(
                pod={
                    "unrestricted": True,
                    "volumes": [
                        {"name": "sock", "hostPath": {"path": "/run/containerd"}},
                        KUBE_TOKEN,
                        INLINE_CSI,
                    ],
                    "securityContext": {"runAsUser": 0, "seLinuxOptions": {"type": "spc_t"}},
                }
            ),
        )
    ):
        manifest["metadata"]["name"] = f"clicks-{index}"
        code, output = apply(control_plane, namespace, manifest)
        assert code == 0, output


def test_a_token_or_csi_volume_cannot_be_added_to_a_consumer_either(
    control_plane: ControlPlane, namespace: str
) -> None:
    """The rules hold on UPDATE: a consumer admitted without them cannot be given a
    projected serviceAccountToken or an inline CSI volume afterwards."""
    assert apply(control_plane, namespace, VALID)[0] == 0
    for volume, message in ((STS_TOKEN, TOKEN_REFUSED), (INLINE_CSI, VOLUMES_REFUSED)):
        code, output = apply(control_plane, namespace, variant(pod={"volumes": [volume]}))
        assert code != 0, output
        assert message in output, output


def test_the_stream_of_a_consumer_cannot_change_but_its_endpoint_can(
    control_plane: ControlPlane, namespace: str
) -> None:
    """Leases and checkpoints belong to one stream's shards: pointing a consumer at
    another stream is refused at apply, with what to do instead."""
    assert apply(control_plane, namespace, VALID)[0] == 0
    for changed, field in (
        (
            variant(source={"kinesis": {"streamName": "orders", "region": "eu-west-1"}}),
            "streamName",
        ),
        (variant(source={"kinesis": {"streamARN": ARN}}), "streamName"),
        (variant(source={"kinesis": {"streamName": "clicks", "region": "us-east-1"}}), "region"),
    ):
        code, output = apply(control_plane, namespace, changed)
        assert code != 0, output
        assert f"{field} cannot change: create a new StreamConsumer" in output, output
    moved = variant(
        source__kinesis__endpointURL="https://vpce-1.kinesis.eu-west-1.vpce.amazonaws.com"
    )
    code, output = apply(control_plane, namespace, moved)
    assert code == 0, output


def test_an_end_cannot_be_added_changed_or_removed(
    control_plane: ControlPlane, namespace: str
) -> None:
    """A bounded consumer's shards end where it does (docs/replaying.md): another end
    is another consumer."""
    bounded = variant(end={"timestamp": "2026-01-01T05:00:00Z"})
    assert apply(control_plane, namespace, bounded)[0] == 0
    for changed in (variant(end={"atCreation": True}), VALID):
        code, output = apply(control_plane, namespace, changed)
        assert code != 0, output
        assert "end cannot be added, changed or removed" in output, output
    assert apply(control_plane, namespace, bounded)[0] == 0


def test_the_kind_of_source_cannot_change(control_plane: ControlPlane, namespace: str) -> None:
    assert apply(control_plane, namespace, VALID)[0] == 0
    code, output = apply(control_plane, namespace, variant(source=DYNAMODB))
    assert code != 0, output
    assert "the kind of source cannot change: create a new StreamConsumer" in output, output

    table = variant(source=DYNAMODB)
    table["metadata"]["name"] = "orders"
    assert apply(control_plane, namespace, table)[0] == 0
    renamed = variant(source={"dynamodbStreams": {"tableName": "other", "region": "eu-west-1"}})
    renamed["metadata"]["name"] = "orders"
    code, output = apply(control_plane, namespace, renamed)
    assert code != 0, output
    assert "tableName cannot change: create a new StreamConsumer" in output, output
    local = variant(
        source={
            "dynamodbStreams": {**DYNAMODB["dynamodbStreams"], "endpointURL": "http://ddb:8000"}
        }
    )
    local["metadata"]["name"] = "orders"
    code, output = apply(control_plane, namespace, local)
    assert code == 0, output


def test_readme_example_applies(control_plane: ControlPlane, namespace: str) -> None:
    readme = (Path(__file__).resolve().parents[2] / "README.md").read_text()
    example = readme.split("```yaml\n", 1)[1].split("```", 1)[0]
    result = control_plane.kubectl("apply", "-n", namespace, "-f", "-", input=example)
    assert result.returncode == 0, result.stderr


def test_spark_examples_apply(control_plane: ControlPlane, namespace: str) -> None:
    """The clickstream Spark manifests (the StreamConsumers, the bronze CronJob, the Spark
    Connect server) are accepted by the real apiserver: schema, CEL rules and the
    workloads' own validation."""
    examples = Path(__file__).resolve().parents[2] / "examples" / "clickstream" / "spark"
    manifests = sorted(examples.glob("*.yaml"))
    assert len(manifests) == 5
    for manifest in manifests:
        result = control_plane.kubectl(
            "apply", "--dry-run=server", "-n", namespace, "-f", str(manifest)
        )
        assert result.returncode == 0, (manifest.name, result.stderr)


def test_cdc_example_applies(control_plane: ControlPlane, namespace: str) -> None:
    """The CDC example's StreamConsumer (a DynamoDB table's stream) is accepted and stored
    as written: its source stays a table stream."""
    manifest = Path(__file__).resolve().parents[2] / "examples" / "cdc" / "streamconsumer.yaml"
    result = control_plane.kubectl("apply", "-n", namespace, "-f", str(manifest))
    assert result.returncode == 0, result.stderr
    stored = control_plane.kubectl(
        "get", "-n", namespace, "streamconsumer/orders-mirror", "-o", "json"
    )
    assert stored.returncode == 0, stored.stderr
    source = json.loads(stored.stdout)["spec"]["source"]
    assert source == {"dynamodbStreams": {"tableName": "orders", "region": "eu-west-1"}}


# Issue 29's fields: new since 0.2.0, kept (not pruned) as written.
FILTER = {
    "patterns": [
        {"partitionKey": {"prefix": "eu-"}},
        {
            "data": [
                {"path": "detail.type", "equalsAny": ["order", "refund"]},
                {"path": "total", "equals": "500"},
                {"path": "test", "exists": False},
            ]
        },
    ]
}
BATCH_CONTROLS = variant(
    processor__onFailure={"then": "skip", "maxRecordAgeSeconds": 3600}, processor__filter=FILTER
)


def test_batch_controls_are_stored_as_written(control_plane: ControlPlane, namespace: str) -> None:
    code, output = apply(control_plane, namespace, BATCH_CONTROLS)
    assert code == 0, output
    stored = control_plane.kubectl("get", "-n", namespace, "streamconsumer/clicks", "-o", "json")
    assert stored.returncode == 0, stored.stderr
    processor = json.loads(stored.stdout)["spec"]["processor"]
    assert processor["onFailure"]["maxRecordAgeSeconds"] == 3600
    assert processor["filter"] == FILTER
