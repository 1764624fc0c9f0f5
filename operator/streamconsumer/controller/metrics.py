"""Operator metrics (Prometheus), served at /metrics on their own plain-HTTP port (never the
worker API's: monitoring needs no worker token). Times are in seconds, Prometheus' unit. The
lag gauge is what an HPA (external metric) or KEDA (prometheus scaler) can scale on. A
consumer's gauges go when its loop stops here (deleted, or this replica no longer leads), its
counters (and the time of its last checkpoint) when it is deleted, and a shard's series when it
leaves the lease table, so cardinality follows the live shards."""

from __future__ import annotations

import contextlib

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from streamconsumer.core.leases import Action, CancelHandoff, Expire, Grant, Reclaim, Revoke

REGISTRY = CollectorRegistry()
_CONSUMER = ["namespace", "consumer"]

LEASE_ACTIONS = Counter(
    "streamconsumer_lease_actions",
    "Lease engine actions: grant, handoff, cancel_handoff, expire, reclaim (a stuck "
    "shard's lease released).",
    [*_CONSUMER, "action"],
    registry=REGISTRY,
)
STATUS_WRITES = Counter(
    "streamconsumer_status_writes", "Status subresource writes.", _CONSUMER, registry=REGISTRY
)
STATUS_WRITE_FAILURES = Counter(
    "streamconsumer_status_write_failures",
    "Status writes that failed (refused, unanswered, or a conflict that was not ours).",
    _CONSUMER,
    registry=REGISTRY,
)
CHECKPOINT_RESULTS = ("ok", "lease_lost", "invalid")
CHECKPOINTS = Counter(
    "streamconsumer_checkpoints",
    "Checkpoint calls by result: ok, lease_lost, invalid.",
    [*_CONSUMER, "result"],
    registry=REGISTRY,
)
LAST_CHECKPOINT = Gauge(
    "streamconsumer_last_checkpoint_timestamp_seconds",
    "When this replica last accepted a checkpoint call of the consumer (Unix time), a "
    "repeated one included; kept like the counters.",
    _CONSUMER,
    registry=REGISTRY,
)
REFUSED_CALLS = Counter(
    "streamconsumer_worker_api_refusals",
    "Worker API calls refused: 401 (no token, or one not ours), 403 (not this consumer's "
    "worker, or speaking for another).",
    ["status"],
    registry=REGISTRY,
)
API_CONNECTIONS_REFUSED = Counter(
    "streamconsumer_worker_api_connections_refused",
    "Connections closed as they were accepted, by listener (api, probes) and the cap they "
    "were over: client (one source address's) or total.",
    ["listener", "cap"],
    registry=REGISTRY,
)
API_CONNECTIONS = Gauge(
    "streamconsumer_worker_api_connections",
    "Connections the worker API holds open, TLS handshakes under way included.",
    registry=REGISTRY,
)
TOKEN_REVIEWS = Counter(
    "streamconsumer_token_reviews",
    "TokenReviews sent to the apiserver (new worker tokens; junk never reaches one).",
    registry=REGISTRY,
)
SECONDS_BEHIND = Gauge(
    "streamconsumer_seconds_behind_latest",
    "How far a shard's owner is behind the stream's tip (MillisBehindLatest / 1000), as it "
    "last reported.",
    [*_CONSUMER, "shard"],
    registry=REGISTRY,
)
MAX_SECONDS_BEHIND = Gauge(
    "streamconsumer_max_seconds_behind_latest",
    "The largest streamconsumer_seconds_behind_latest over the consumer's shards.",
    _CONSUMER,
    registry=REGISTRY,
)
WORKERS = Gauge("streamconsumer_workers", "Live workers.", _CONSUMER, registry=REGISTRY)
OPEN_SHARDS = Gauge("streamconsumer_open_shards", "Open shards.", _CONSUMER, registry=REGISTRY)
BLOCKED_SHARDS = Gauge(
    "streamconsumer_blocked_shards",
    "Shards blocked by a record the failure policy could not get past.",
    _CONSUMER,
    registry=REGISTRY,
)
STUCK_SHARDS = Gauge(
    "streamconsumer_stuck_shards",
    "Shards whose position has not moved while records waited past leases.stuckShardSeconds.",
    _CONSUMER,
    registry=REGISTRY,
)
LEADER = Gauge(
    "streamconsumer_leader",
    "1 on the replica that leads (reconciles, serves workers), 0 on a standby.",
    registry=REGISTRY,
)
LOOP_LAG = Histogram(
    "streamconsumer_event_loop_lag_seconds",
    "How late the operator's event loop ran a wake-up due now (sampled every second). "
    "Past a second, lease renewals, status writes and worker calls all wait behind it.",
    buckets=(0.005, 0.025, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0),
    registry=REGISTRY,
)
_GAUGES = (MAX_SECONDS_BEHIND, WORKERS, OPEN_SHARDS, BLOCKED_SHARDS, STUCK_SHARDS)
_COUNTERS = (STATUS_WRITES, STATUS_WRITE_FAILURES)
# Counters with a label after the consumer's, and its name.
_COUNTERS_BY = ((LEASE_ACTIONS, "action"), (CHECKPOINTS, "result"))

_ACTION_NAMES: dict[type, str] = {
    Grant: "grant",
    Revoke: "handoff",
    CancelHandoff: "cancel_handoff",
    Expire: "expire",
    Reclaim: "reclaim",
}


def count_action(namespace: str, consumer: str, action: Action) -> None:
    LEASE_ACTIONS.labels(namespace, consumer, _ACTION_NAMES[type(action)]).inc()


class ConsumerGauges:
    """One consumer's gauges: per-shard lag for the shards in its table, and totals."""

    def __init__(self, namespace: str, consumer: str) -> None:
        self.labels = (namespace, consumer)
        self._shards: set[str] = set()
        # From 0, so a rate or an alert on an increase sees the first one.
        for counter in _COUNTERS:
            counter.labels(*self.labels)
        for result in CHECKPOINT_RESULTS:
            CHECKPOINTS.labels(*self.labels, result)
        for action in _ACTION_NAMES.values():
            LEASE_ACTIONS.labels(*self.labels, action)

    def update(
        self,
        lag_millis: dict[str, int],
        workers: int,
        open_shards: int,
        blocked_shards: int,
        stuck_shards: int,
    ) -> None:
        for shard in self._shards - lag_millis.keys():
            SECONDS_BEHIND.remove(*self.labels, shard)
        for shard, millis in lag_millis.items():
            SECONDS_BEHIND.labels(*self.labels, shard).set(millis / 1000)
        self._shards = set(lag_millis)
        MAX_SECONDS_BEHIND.labels(*self.labels).set(max(lag_millis.values(), default=0) / 1000)
        WORKERS.labels(*self.labels).set(workers)
        OPEN_SHARDS.labels(*self.labels).set(open_shards)
        BLOCKED_SHARDS.labels(*self.labels).set(blocked_shards)
        STUCK_SHARDS.labels(*self.labels).set(stuck_shards)

    def clear(self) -> None:
        """Removes the consumer's gauges: its loop stopped here (deleted, or this replica
        no longer leads), so they would only repeat stale values. Counters stay until the
        consumer is gone (`forget`): what a deposed replica did is still worth reading."""
        for shard in self._shards:
            SECONDS_BEHIND.remove(*self.labels, shard)
        self._shards = set()
        for gauge in _GAUGES:
            with contextlib.suppress(KeyError):  # never set for this consumer
                gauge.remove(*self.labels)


def forget(namespace: str, consumer: str) -> None:
    """Removes the counters of a consumer that was deleted (and the time of its last
    checkpoint here, kept like them)."""
    for counter in (*_COUNTERS, LAST_CHECKPOINT):
        with contextlib.suppress(KeyError):
            counter.remove(namespace, consumer)
    for family, last in _COUNTERS_BY:
        for value in _values_of(family, last, (namespace, consumer)):
            family.remove(namespace, consumer, value)


def _values_of(family: Counter, label: str, consumer: tuple[str, str]) -> set[str]:
    """The values `label` has among the consumer's series of `family` (read from its
    samples: prometheus_client has no public list of a family's children)."""
    namespace, name = consumer
    return {
        sample.labels[label]
        for metric in family.collect()
        for sample in metric.samples
        if sample.labels.get("namespace") == namespace and sample.labels.get("consumer") == name
    }
