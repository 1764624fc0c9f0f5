"""Operator metrics (Prometheus), served at /metrics on the worker-API port. The lag gauge
is what an HPA (external metric) or KEDA (prometheus scaler) can scale on."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge

from streamconsumer.core.leases import Action, CancelHandoff, Expire, Grant, Reclaim, Revoke

REGISTRY = CollectorRegistry()
_CONSUMER = ["namespace", "consumer"]

LEASE_ACTIONS = Counter(
    "streamconsumer_lease_actions",
    "Lease engine actions: grant, handoff, cancel_handoff, expire.",
    [*_CONSUMER, "action"],
    registry=REGISTRY,
)
STATUS_WRITES = Counter(
    "streamconsumer_status_writes", "Status subresource writes.", _CONSUMER, registry=REGISTRY
)
CHECKPOINTS = Counter(
    "streamconsumer_checkpoints",
    "Checkpoint calls by result: ok, lease_lost, invalid.",
    [*_CONSUMER, "result"],
    registry=REGISTRY,
)
REFUSED_CALLS = Counter(
    "streamconsumer_worker_api_refusals",
    "Worker API calls refused: 401 (no token, or one not ours), 403 (not this consumer's "
    "worker, or speaking for another).",
    ["status"],
    registry=REGISTRY,
)
TOKEN_REVIEWS = Counter(
    "streamconsumer_token_reviews",
    "TokenReviews sent to the apiserver (new worker tokens; junk never reaches one).",
    registry=REGISTRY,
)
MILLIS_BEHIND = Gauge(
    "streamconsumer_millis_behind_latest",
    "MillisBehindLatest per shard, as its owner last reported it.",
    [*_CONSUMER, "shard"],
    registry=REGISTRY,
)
MAX_MILLIS_BEHIND = Gauge(
    "streamconsumer_max_millis_behind_latest",
    "The largest MillisBehindLatest over the consumer's shards.",
    _CONSUMER,
    registry=REGISTRY,
)
WORKERS = Gauge("streamconsumer_workers", "Live workers.", _CONSUMER, registry=REGISTRY)
OPEN_SHARDS = Gauge("streamconsumer_open_shards", "Open shards.", _CONSUMER, registry=REGISTRY)
STUCK_SHARDS = Gauge(
    "streamconsumer_stuck_shards",
    "Shards whose position has not moved while records waited past leases.stuckShardSeconds.",
    _CONSUMER,
    registry=REGISTRY,
)

_ACTION_NAMES: dict[type, str] = {
    Grant: "grant",
    Revoke: "handoff",
    CancelHandoff: "cancel_handoff",
    Expire: "expire",
    Reclaim: "reclaim",
}


def count_action(namespace: str, consumer: str, action: Action) -> None:
    LEASE_ACTIONS.labels(namespace, consumer, _ACTION_NAMES[type(action)]).inc()


class LagGauges:
    """Keeps one consumer's per-shard lag gauges, dropping shards it no longer owns."""

    def __init__(self, namespace: str, consumer: str) -> None:
        self.labels = (namespace, consumer)
        self._shards: set[str] = set()

    def update(self, lag: dict[str, int], workers: int, open_shards: int) -> None:
        for shard in self._shards - lag.keys():
            MILLIS_BEHIND.remove(*self.labels, shard)
        for shard, millis in lag.items():
            MILLIS_BEHIND.labels(*self.labels, shard).set(millis)
        self._shards = set(lag)
        MAX_MILLIS_BEHIND.labels(*self.labels).set(max(lag.values(), default=0))
        WORKERS.labels(*self.labels).set(workers)
        OPEN_SHARDS.labels(*self.labels).set(open_shards)
