"""The StreamConsumer custom resource: spec (what the user declares) and status (what the
operator keeps: per-shard leases and checkpoints, workers, conditions).

`crds/streamconsumer.yaml` is generated from these models (`make crds`); rules that a
structural schema can carry are CEL rules here, so `kubectl apply` refuses a bad spec."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from enum import StrEnum
from typing import TYPE_CHECKING, Annotated, Any

from pydantic import AwareDatetime, Field, model_validator

from streamconsumer.models.base import Model, added_since, with_rules
from streamconsumer.models.failure import FailurePolicy
from streamconsumer.models.pod_policy import MAX_PROJECTED_SOURCES, POD_RULES, PROCESSOR_RULES
from streamconsumer.models.record_filter import RecordFilter
from streamconsumer.models.source import at_timestamp_rules, same, source_model
from streamconsumer.sources import registry

GROUP = "streamconsumer.io"
VERSION = "v1alpha1"
API_VERSION = f"{GROUP}/{VERSION}"
KIND = "StreamConsumer"
PLURAL = "streamconsumers"

SequenceNumber = Annotated[str, Field(pattern=r"^[0-9]{1,128}$", max_length=128)]
"""A Kinesis sequence number: up to 128 decimal digits, compared as an integer."""

DNS_SUBDOMAIN = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$"
"""A Kubernetes object name such as a ServiceAccount's (RFC 1123 subdomain)."""
DNS_LABEL = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$"
"""A namespace's name, or a name others are made from (RFC 1123 label, 63 at most)."""

ShardCheckpoint = Annotated[str, Field(pattern=r"^([0-9]{1,128}|SHARD_END)$", max_length=128)]
"""A sequence number, or SHARD_END once every record of a closed shard is processed."""


# `spec.source`: a field per stream kind (`sources/kinds/`), exactly one set. Its fields
# come from the kinds, so code reads them through `sources.registry.selected`. The kinds'
# modules are pydantic only (readers and boto3 come when a stream is read).
if TYPE_CHECKING:
    Source = Model
else:
    Source = source_model(registry.KINDS.values())


class InitialPosition(StrEnum):
    """Where a shard with no checkpoint starts."""

    TRIM_HORIZON = "TRIM_HORIZON"
    LATEST = "LATEST"
    AT_TIMESTAMP = "AT_TIMESTAMP"


def kubernetes(
    kind: str, many: bool = False, max_items: Mapping[str, int] | None = None
) -> dict[str, Any]:
    """Marks a field the CRD validates with Kubernetes' own schema of `kind` (core/v1),
    as the apiserver validates a Pod (models/kubernetes_schemas.py). `max_items` bounds
    lists inside it that Kubernetes leaves open (by their dotted path in `kind`), for a
    CEL rule over them to fit the apiserver's cost budget."""
    extra: dict[str, Any] = {"x-kubernetes-schema": kind, "x-kubernetes-many": many}
    if max_items:
        extra["x-kubernetes-max-items"] = dict(max_items)
    return extra


class EnvVar(Model):
    """A variable of the worker container: a value, or one read from a Secret, a
    ConfigMap or the pod (`valueFrom`, as in a Pod)."""

    model_config = with_rules(
        ("!(has(self.value) && has(self.valueFrom))", "give value or valueFrom, not both"),
    )

    name: str = Field(min_length=1, max_length=256, pattern=r"^[A-Za-z_][A-Za-z0-9_.-]*$")
    value: str | None = Field(default=None, max_length=32768)
    value_from: dict[str, Any] | None = Field(
        default=None, json_schema_extra=kubernetes("EnvVarSource")
    )


class LogLevel(StrEnum):
    DEBUG = "DEBUG"
    INFO = "INFO"
    WARNING = "WARNING"
    ERROR = "ERROR"


MAX_PARALLELISM = 100  # process_records calls of one shard in flight at most
MAX_BATCH_SIZE = 10_000  # records of one process_records call at most (GetRecords' limit)
MAX_PROCESSES = 64  # worker processes of one pod at most


class Processor(Model):
    """The user's record processor and the image it runs in."""

    model_config = with_rules(
        *PROCESSOR_RULES,
        (
            same("serviceAccountName"),
            "serviceAccountName cannot change: workers running as the old ServiceAccount "
            "would be refused before they could hand their shards off; create a new "
            "StreamConsumer (docs/checkpoints.md carries the checkpoints over)",
        ),
    )

    image: str = Field(
        min_length=1, max_length=1024, description="Worker image with the processor."
    )
    entrypoint: str = Field(
        pattern=r"^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*:[A-Za-z_][A-Za-z0-9_]*$",
        max_length=512,
        description='The processor class or function, as "package.module:Name".',
    )
    env: list[EnvVar] = Field(default_factory=list, max_length=256)
    env_from: list[dict[str, Any]] = Field(
        default_factory=list,
        max_length=16,
        description="Environment from Secrets (e.g. AWS credentials: never put secrets in "
        "the spec) or ConfigMaps, as a container's envFrom.",
        json_schema_extra=kubernetes("EnvFromSource", many=True),
    )
    service_account_name: str | None = Field(
        default=None,
        max_length=253,
        pattern=DNS_SUBDOMAIN,
        description="The workers' ServiceAccount, which the operator creates and owns "
        "(default `<name>-worker`), for IAM trust policies that name it (IRSA, EKS Pod "
        "Identity). Never an existing one: a ServiceAccount of that name that is not "
        "this StreamConsumer's is left untouched and no worker runs (ObjectConflict). "
        "Setting it needs the rights to create ServiceAccounts and pods in the "
        "namespace (docs/security.md#the-workers-serviceaccount); it cannot change.",
        json_schema_extra=added_since("0.2.0"),
    )
    service_account_annotations: dict[str, str] = Field(
        default_factory=dict,
        description="Annotations for the workers' ServiceAccount, e.g. an IRSA role ARN.",
    )
    resources: dict[str, Any] | None = Field(
        default=None,
        description="Kubernetes resource requests and limits for the worker container.",
        json_schema_extra={"x-kubernetes-preserve-unknown-fields": True, "type": "object"},
    )
    on_failure: FailurePolicy = Field(
        default_factory=FailurePolicy,
        description="What happens to a batch whose processing keeps raising.",
    )
    log_level: LogLevel = Field(
        default=LogLevel.INFO,
        description="The level of the processor's own loggers in the worker's output "
        "(default INFO: its logger.info lines show). The worker's own and the AWS SDK's "
        "stay at WARNING (STREAMCONSUMER_LOG_LEVEL in env sets the worker's).",
        json_schema_extra=added_since("0.2.0"),
    )
    filter: RecordFilter | None = Field(
        default=None,
        description="Only records matching this reach the processor (as Lambda's "
        "FilterCriteria); the others are checkpointed past without a call and counted in "
        "streamconsumer_worker_filtered_records_total. Needs workers of 0.2.0 or later.",
        json_schema_extra=added_since("0.2.0"),
    )
    parallelism: int = Field(
        default=1,
        ge=1,
        le=MAX_PARALLELISM,
        description="process_records calls of one shard in flight at most (as Lambda's "
        "ParallelizationFactor): each read's records are split by partition key (a "
        "DynamoDB item's key) into up to this many calls at once, a key's records always "
        "in order and never concurrent; the worker checkpoints up to the first record not yet "
        "done. process_records must then be thread-safe, and a batching processor (Spark) "
        "runs with 1. Needs workers of 0.2.0 or later (docs/parallelism.md).",
        json_schema_extra=added_since("0.2.0"),
    )
    batch_size: int | None = Field(
        default=None,
        ge=1,
        le=MAX_BATCH_SIZE,
        description="The most records one process_records call gets (as Lambda's BatchSize; "
        "default: all a read brings, reading.maxRecords). A read's records are then "
        "delivered in calls of at most this many, one after another for each key's group "
        "(processor.parallelism of them at once); the worker checkpoints up to the first "
        "record not yet done. A batching processor (Spark) takes whole reads. Needs workers of "
        "0.2.0 or later (docs/parallelism.md).",
        json_schema_extra=added_since("0.2.0"),
    )
    processes: int = Field(
        default=1,
        ge=1,
        le=MAX_PROCESSES,
        description="Worker processes in each pod, for a processor that is CPU-bound (one "
        "core each; give the pod the resources). Each process is a worker of its own, named "
        "`<pod>#<index>`, with its own shards (leases.maxPerWorker counts per process); the "
        "lag autoscaler counts pods. Needs workers of 0.2.0 or later: an older worker runs "
        "one process (docs/parallelism.md#processes).",
        json_schema_extra=added_since("0.2.0"),
    )


# What the operator puts in every worker pod itself (controller/workloads/children.py).
CONSUMER_LABEL = f"{GROUP}/consumer"
NAME_LABEL = "app.kubernetes.io/name"
SCRATCH_VOLUME, SCRATCH_DIR = "scratch", "/tmp"
TOKEN_VOLUME, TOKEN_DIR = "streamconsumer-token", f"/var/run/secrets/{GROUP}"
# The operator's CA certificate (a ConfigMap per consumer), to verify the worker API.
CA_VOLUME, CA_DIR, CA_FILE = "streamconsumer-operator-ca", f"/etc/{GROUP}/operator-ca", "ca.crt"
RESERVED_VOLUMES = (SCRATCH_VOLUME, TOKEN_VOLUME, CA_VOLUME)
RESERVED_MOUNTS = (SCRATCH_DIR, TOKEN_DIR, CA_DIR)
RESERVED_LABELS = (NAME_LABEL, CONSUMER_LABEL)


class PodSettings(Model):
    """What platform teams set on every workload, passed to the worker pods as written
    and validated by the CRD with Kubernetes' own schemas."""

    model_config = with_rules(
        (
            f"!has(self.volumes) || self.volumes.all(v, !(v.name in {list(RESERVED_VOLUMES)}))",
            f"volume names {', '.join(RESERVED_VOLUMES)} are the worker's own",
        ),
        (
            "!has(self.volumeMounts) || "
            f"self.volumeMounts.all(m, !(m.mountPath in {list(RESERVED_MOUNTS)}))",
            f"{', '.join(RESERVED_MOUNTS)} are mounted by the worker already",
        ),
        (
            f"!has(self.labels) || self.labels.all(k, !(k in {list(RESERVED_LABELS)}))",
            f"labels {', '.join(RESERVED_LABELS)} select the workers: they are set for you",
        ),
        *POD_RULES,  # no more than the tenant could run: models/pod_policy.py
    )

    labels: dict[str, str] = Field(
        default_factory=dict,
        description="Labels of the worker pods, beside the operator's own (which win). "
        "Setting them needs the right to create pods in the namespace: a Service or a "
        "NetworkPolicy may select them (docs/security.md#no-confused-deputy).",
    )
    annotations: dict[str, str] = Field(default_factory=dict)
    node_selector: dict[str, str] = Field(default_factory=dict)
    tolerations: list[dict[str, Any]] = Field(
        default_factory=list, json_schema_extra=kubernetes("Toleration", many=True)
    )
    affinity: dict[str, Any] | None = Field(default=None, json_schema_extra=kubernetes("Affinity"))
    topology_spread_constraints: list[dict[str, Any]] = Field(
        default_factory=list, json_schema_extra=kubernetes("TopologySpreadConstraint", many=True)
    )
    priority_class_name: str | None = Field(default=None, max_length=253)
    image_pull_secrets: list[dict[str, Any]] = Field(
        default_factory=list, json_schema_extra=kubernetes("LocalObjectReference", many=True)
    )
    security_context: dict[str, Any] | None = Field(
        default=None,
        description="The pod's securityContext (the container keeps its own: non-root, "
        "read-only root, no privilege escalation).",
        json_schema_extra=kubernetes("PodSecurityContext"),
    )
    volumes: list[dict[str, Any]] = Field(
        default_factory=list,
        max_length=64,
        description="Volumes of the worker pods: configMap, secret, emptyDir, "
        "persistentVolumeClaim, projected (of configMap, secret and downwardAPI sources), "
        "downwardAPI, ephemeral or image; others (csi, a serviceAccountToken) only with "
        "`unrestricted` (docs/security.md#pod-template).",
        json_schema_extra=kubernetes(
            "Volume", many=True, max_items={"projected.sources": MAX_PROJECTED_SOURCES}
        ),
    )
    volume_mounts: list[dict[str, Any]] = Field(
        default_factory=list,
        description="Mounts of `volumes` in the worker container.",
        json_schema_extra=kubernetes("VolumeMount", many=True),
    )
    unrestricted: bool = Field(
        default=False,
        description="Lift the limits on volumes and the pod securityContext (hostPath, "
        "root, ...): only in namespaces the platform admins allow in the operator's "
        "configuration (docs/security.md#pod-template); elsewhere refused.",
    )
    termination_grace_period_seconds: int = Field(
        default=30,
        ge=10,
        le=3600,
        description="The pod's grace period; a worker hands its shards off within it "
        "(less a 5 s margin) when it is stopped.",
    )


class Autoscaling(Model):
    """The built-in lag autoscaler. When enabled, the operator (not the user) sets the
    number of workers; `spec.replicas` is then only the starting point.

    It scales on time behind (MillisBehindLatest), the backlog measure Kinesis reports; a
    records-behind target is not offered because Kinesis exposes no record count behind
    a shard's tip (see docs/architecture.md)."""

    model_config = with_rules(
        ("self.minReplicas <= self.maxReplicas", "minReplicas must not exceed maxReplicas"),
    )

    enabled: bool = True
    min_replicas: int = Field(default=1, ge=0, le=1000)
    max_replicas: int = Field(default=10, ge=1, le=1000)
    target_lag_seconds: float = Field(
        gt=0, le=86400, description="Scale so the slowest shard stays about this far behind."
    )
    scale_up_stabilization_seconds: int = Field(default=30, ge=0, le=3600)
    scale_down_stabilization_seconds: int = Field(default=300, ge=0, le=86400)
    allow_idle_workers: bool = Field(
        default=False, description="Allow more workers than assignable shards."
    )


class LeaseSettings(Model):
    duration_seconds: float = Field(
        default=20,
        gt=0,
        le=3600,
        description="A worker silent for this long loses its shards; it stops on its own first.",
    )
    max_per_worker: int | None = Field(
        default=None, ge=1, description="At most this many shards per worker."
    )
    stuck_shard_seconds: float = Field(
        default=300,
        ge=0,
        le=604800,
        json_schema_extra=added_since("0.2.0"),
        description="The stuck-shard watchdog (default 300): a shard whose position has not "
        "moved while records have waited this long is reported (Ready=False, reason ShardStuck; an "
        "Event; the streamconsumer_stuck_shards metric) and its lease withdrawn once and "
        "granted again. 0 turns the watchdog off. Set it above the longest a record may "
        "normally wait for its processing (processor.onFailure.timeoutSeconds if your "
        "calls are that long).",
    )


# Kinesis allows 5 GetRecords a second per shard; 4 keeps a 250 ms-a-call processor busy.
MAX_READS_PER_SECOND = 4.0
DEFAULT_MAX_RECORDS = 1000
MAX_BATCHING_WINDOW_SECONDS = 300  # as Lambda's MaximumBatchingWindowInSeconds


class Reading(Model):
    max_records: int = Field(
        default=DEFAULT_MAX_RECORDS, ge=1, le=10000, description="GetRecords limit."
    )
    idle_between_reads_ms: int = Field(
        default=500, ge=0, le=60000, description="Pause after an empty read."
    )
    prefetch: int = Field(default=3, ge=1, le=100, description="Batches read ahead per shard.")
    max_reads_per_second: float = Field(
        default=MAX_READS_PER_SECOND,
        gt=0,
        le=5,
        json_schema_extra=added_since("0.2.0"),
        description="GetRecords calls per shard per second at most (default 4: enough to keep "
        "a processor that takes 250 ms a call busy on a backlog). Kinesis allows 5 per "
        "shard, shared by every polling consumer of the stream: with others polling it, "
        "keep the sum within 5 (or use consumer: fanOut). A shard caught up reads less: "
        "after an empty read the worker waits idleBetweenReadsMs.",
    )
    max_batching_window_seconds: float = Field(
        default=0,
        ge=0,
        le=MAX_BATCHING_WINDOW_SECONDS,
        json_schema_extra=added_since("0.2.0"),
        description="How long a shard's next process_records call may wait for more reads "
        "to fill it (as Lambda's MaximumBatchingWindowInSeconds; default 0: each read is "
        "a call at once). The call is made when it holds maxRecords records (batchSize times "
        "parallelism under processor.batchSize), when the window has passed since its "
        "first record was read, or at the shard's end: a quiet stream then costs a call per "
        "window, not one per record, and a record waits at most the window longer. Needs "
        "workers of 0.2.0 or later (docs/parallelism.md#batching-window).",
    )


class OnDelete(StrEnum):
    KEEP = "Keep"
    DISCARD = "Discard"


class CheckpointRetention(Model):
    """What becomes of the checkpoints when the StreamConsumer is deleted (a GitOps
    prune, a rename, a namespace move): docs/checkpoints.md."""

    on_delete: OnDelete = Field(
        default=OnDelete.KEEP,
        description="Keep: the workers hand their shards off, then the lease table is kept "
        "in the ConfigMap <name>-checkpoints, and a StreamConsumer of that name and stream "
        "created within `days` resumes from it. Discard: the checkpoints go with the object.",
    )
    days: int = Field(
        default=7, ge=1, le=365, description="How long a kept table may be resumed from."
    )


class StartFrom(Model):
    """Checkpoints a new StreamConsumer starts from (docs/checkpoints.md#start-from)."""

    checkpoints_of: str = Field(
        max_length=63,
        pattern=DNS_LABEL,
        description="Start from the checkpoints kept for the StreamConsumer of this name in "
        "this namespace (the ConfigMap <name>-checkpoints: kept when it was deleted, or "
        "written by `streamconsumer checkpoints import`). Read once, when this object first "
        "starts; it must be of the same stream and not expired, or the consumer does not "
        "start (a CheckpointsNotResumed Event says why) rather than start elsewhere.",
    )


END_GRACE_SECONDS = 5.0
"""A shard with no record past a consumer's end is done with once a read begun this long
after the end finds it caught up: a record put later arrives after the end, and this
covers the lag before a put record is readable and the skew between clocks."""


class End(Model):
    """Where a bounded consumer stops (docs/replaying.md): each shard at its first record
    that arrived after the end, and the consumer is Complete once every shard is."""

    model_config = with_rules(
        (
            "has(self.timestamp) != (has(self.atCreation) && self.atCreation)",
            "end needs exactly one of timestamp and atCreation: true",
        ),
    )

    timestamp: AwareDatetime | None = Field(
        default=None,
        description="Deliver the records that arrived at or before this time (their "
        "ApproximateArrivalTimestamp, or a DynamoDB change's ApproximateCreationDateTime), "
        "none after it.",
    )
    at_creation: bool = Field(
        default=False,
        description="End at the stream's tip when this StreamConsumer was created (its "
        "metadata.creationTimestamp): read what is there, and stop.",
    )

    @model_validator(mode="after")
    def _exactly_one(self) -> End:
        if (self.timestamp is not None) == self.at_creation:
            raise ValueError("end needs exactly one of timestamp and atCreation: true")
        return self

    def instant(self, created: datetime | None) -> datetime | None:
        """The end as a time: `created` is the object's creationTimestamp (None: unknown
        yet, so an atCreation end is not known either)."""
        return self.timestamp if self.timestamp is not None else created


class StreamConsumerSpec(Model):
    model_config = with_rules(
        (
            "self.initialPosition != 'AT_TIMESTAMP' || has(self.initialTimestamp)",
            "initialPosition AT_TIMESTAMP needs initialTimestamp",
        ),
        (
            "!has(self.initialTimestamp) || self.initialPosition == 'AT_TIMESTAMP'",
            "initialTimestamp is only used with initialPosition AT_TIMESTAMP",
        ),
        *at_timestamp_rules(registry.KINDS.values()),
        (same("end"), "end cannot be added, changed or removed: create another StreamConsumer"),
    )

    source: Source
    processor: Processor
    initial_position: InitialPosition = Field(
        default=InitialPosition.TRIM_HORIZON,
        description="Where a shard without a checkpoint starts: TRIM_HORIZON (the oldest "
        "record), LATEST (what arrives from the consumer's creation on, however early a "
        "shard moves) or AT_TIMESTAMP (initialTimestamp).",
    )
    initial_timestamp: datetime | None = None
    replicas: int = Field(default=1, ge=0, le=1000, description="Worker pods (scale subresource).")
    pod: PodSettings = Field(default_factory=PodSettings)
    paused: bool = Field(
        default=False,
        description="Stop consuming: every worker hands its shards off at their positions "
        "and none is granted until this is false again (the pods stay; the autoscaler "
        "holds). `streamconsumer pause|resume NAME` sets it, or Git.",
    )
    autoscaling: Autoscaling | None = None
    leases: LeaseSettings = Field(default_factory=LeaseSettings)
    reading: Reading = Field(default_factory=Reading)
    checkpoint_retention: CheckpointRetention = Field(default_factory=CheckpointRetention)
    start_from: StartFrom | None = Field(default=None, json_schema_extra=added_since("0.2.0"))
    end: End | None = Field(
        default=None,
        json_schema_extra=added_since("0.2.0"),
        description="Make this a bounded consumer: it stops at the end and reaches the "
        "Complete condition, its workers scaled to zero; records after the end are never "
        "delivered. Fixed when set (docs/replaying.md). Needs workers of 0.2.0 or later.",
    )


class LeaseState(StrEnum):
    ACTIVE = "Active"  # owned and being processed
    HANDOFF = "HandOff"  # the owner was asked to release it to `handoffTo`
    RELEASED = "Released"  # no owner; resumes from the checkpoint when granted
    FINISHED = "Finished"  # checkpointed at SHARD_END
    # Not a lease: the entry names a ConfigMap holding part of a table kept in lease
    # groups (docs/design.md#lease-groups). A value the previous release's models
    # refuse, so that it never reads such a table as empty.
    IN_LEASE_GROUPS = "InLeaseGroups"
    # Not a lease either: the entry names the newest segment of a table kept as a lease
    # log (docs/design.md#the-lease-log). Releases before it refuse the value.
    IN_LEASE_LOG = "InLeaseLog"


class ResetPosition(Model):
    """Where a reset sends a shard: its oldest record, or the first at or after a time."""

    timestamp: datetime | None = Field(default=None, description="None: TRIM_HORIZON.")


class Lease(Model):
    """One shard's lease and checkpoint; the durable truth lives only here."""

    owner: str | None = None
    epoch: int = Field(default=0, ge=0)
    checkpoint: ShardCheckpoint | None = None
    parents: list[str] = Field(default_factory=list, max_length=2)
    state: LeaseState = LeaseState.RELEASED
    handoff_to: str | None = None
    start: ResetPosition | None = Field(
        default=None, description="Where the next owner starts without a checkpoint (a reset)."
    )
    resetting: bool = Field(
        default=False, description="A reset waits for the owner to hand the shard off."
    )
    millis_behind_latest: int | None = Field(default=None, ge=0)


RESET_ANNOTATION = f"reset.{GROUP}/request"
"""Where `streamconsumer reset` puts its request (JSON of ResetRequest) on the object. Not
under `{GROUP}/`: kopf keeps its own state there and ignores changes to those keys."""


DELETION_PROTECTION = f"{GROUP}/deletion-protection"
"""Set to "true", the chart's admission policy refuses to delete the object (a GitOps
prune of a consumer meant to stay)."""

REQUESTED_BY = f"audit.{GROUP}/requested-by"
"""Who asks, beside the pause, resume or reset they ask for: their user name, written by
`streamconsumer pause|resume|reset` (streamconsumer/audit.py reads it)."""


class ResetRequest(Model):
    """Send shards (all unfinished ones if none are named) back to `to`, safely while
    workers run. Applied once per id; the status keeps the last id applied."""

    id: str = Field(min_length=1, max_length=64)
    to: ResetPosition
    shards: list[str] = Field(default_factory=list, max_length=10000)
    requested_by: str | None = Field(
        default=None, exclude=True, description="Filled by the operator (audit.py), never read."
    )

    @classmethod
    def on(cls, resource: Mapping[str, Any]) -> ResetRequest | None:
        """The reset asked for on the object, if any (raises ValidationError if bad)."""
        raw = (resource.get("metadata", {}).get("annotations") or {}).get(RESET_ANNOTATION)
        return None if raw is None else cls.model_validate_json(raw)


class ResetRecord(Model):
    """The last reset the operator applied (`streamconsumer reset`)."""

    id: str = Field(max_length=64)
    to: ResetPosition
    shards: list[str] = Field(default_factory=list, description="The shards it reset.")
    requested_by: str | None = Field(
        default=None, max_length=300, description="Who asked for it (docs/security.md#audit)."
    )


class Term(Model):
    """Which operator term last fenced the status (docs/design.md#term-fence): each
    term's first write raises `number`; a writer that finds a number other than its
    own has been superseded and never writes again."""

    number: int = Field(ge=0)
    holder: str = Field(max_length=253, description="The operator process that fenced.")


class WorkerSummary(Model):
    shards: int = Field(ge=0)
    draining: bool = False


class Condition(Model):
    type: str
    status: str = Field(pattern=r"^(True|False|Unknown)$")
    reason: str = Field(pattern=r"^[A-Za-z]([A-Za-z0-9_,:]*[A-Za-z0-9_])?$")
    message: str = ""
    observed_generation: int | None = None
    last_transition_time: datetime


class StreamConsumerStatus(Model):
    observed_generation: int | None = None
    term: Term | None = None
    finished_shards: list[str] = Field(
        default_factory=list,
        description="Finished shards the stream still lists, compacted as first..last runs "
        "(their leases have left the table; lineage must not forget them).",
    )
    promised_lease_seconds: float | None = Field(
        default=None,
        description="The longest lease duration a worker may still hold: a restarted "
        "operator waits this long before taking shards from a silent worker.",
    )
    replicas: int = Field(default=0, description="Live, non-draining workers.")
    desired_replicas: int | None = Field(
        default=None, description="Workers the lag autoscaler asks for (when enabled)."
    )
    label_selector: str | None = None
    shards: int = Field(default=0, description="Open shards.")
    lag_millis: int | None = Field(default=None, description="Largest MillisBehindLatest.")
    leases: dict[str, Lease] = Field(
        default_factory=dict,
        description="By shard id; past 100 leases and finished shards, one entry of "
        "state InLeaseLog instead, naming the ConfigMap of the table's newest log segment "
        "(its epoch: segments since the last fold; its checkpoint: the segment's digest; "
        "docs/design.md#the-lease-log); with STREAMCONSUMER_LEASE_LOG=false, one entry "
        "of state InLeaseGroups for each ConfigMap holding a part of it.",
    )
    last_reset: ResetRecord | None = None
    stream: str | None = Field(
        default=None,
        max_length=2400,
        description="The stream the checkpoints are of (Kinesis: its ARN and creation "
        "time). A stream deleted and created again under the same name is never read from "
        "them: the consumer stops with reason StreamRecreated (docs/checkpoints.md).",
    )
    stream_replaced: str | None = Field(
        default=None,
        max_length=2400,
        description="Another stream listed under the name since (deleted and created again): "
        "kept so that no operator serves the checkpoints again until the StreamConsumer is "
        "created anew (reason StreamRecreated).",
    )
    paused_by: str | None = Field(
        default=None,
        max_length=300,
        description="Who paused it, while paused (docs/security.md#audit).",
    )
    workers: dict[str, WorkerSummary] = Field(
        default_factory=dict,
        description="Each worker and the shards it holds, up to 50 workers; past that only "
        "those draining (replicas counts them; `streamconsumer status` shows who owns what).",
    )
    conditions: list[Condition] = Field(
        default_factory=list,
        json_schema_extra={"x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["type"]},
    )
