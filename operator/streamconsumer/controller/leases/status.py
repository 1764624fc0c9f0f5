"""The status subresource: rendered from the coordinator, written at most about once a
second per consumer, and guarded by resourceVersion so a stale operator replica cannot
overwrite a newer lease table (docs/design.md#cheap-on-the-apiserver).

The writer talks to the apiserver through a two-call port (`StatusApi`), so the same
conflict logic runs against Kubernetes (`KubeStatusApi`) and in the simulator."""

from __future__ import annotations

import datetime
import threading
from collections import Counter
from dataclasses import dataclass
from typing import Any, Protocol, cast

from kubernetes import client as k8s
from kubernetes.client.exceptions import ApiException
from urllib3.exceptions import HTTPError

from streamconsumer.controller.leases.lease_coordinator import (
    DurableState,
    LeaseCoordinator,
    durable_fields,
)
from streamconsumer.controller.workloads.children import label_selector
from streamconsumer.controller.workloads.owned import JSON_PATCH, api_message, replacing
from streamconsumer.controller.workloads.worker_health import WORKERS_NOT_STARTING, WorkerHealth
from streamconsumer.core.leases import ACTIVE, HANDOFF
from streamconsumer.models import API_VERSION, GROUP, KIND, PLURAL, VERSION
from streamconsumer.models.resource import Condition, StreamConsumerStatus, Term, WorkerSummary


def _condition(
    previous: dict[str, Condition],
    type_: str,
    ok: bool | None,
    reason: str,
    message: str,
    generation: int | None,
) -> Condition:
    """`ok` None: Unknown."""
    status = "Unknown" if ok is None else "True" if ok else "False"
    before = previous.get(type_)
    since = (
        before.last_transition_time
        if before is not None and before.status == status
        else datetime.datetime.now(datetime.UTC).replace(microsecond=0)
    )
    return Condition(
        type=type_,
        status=status,
        reason=reason,
        message=message,
        observed_generation=generation,
        last_transition_time=since,
    )


@dataclass(frozen=True)
class Children:
    """How applying the workers' objects went: not yet (`known` false; `failed`, why the
    last attempt failed, if one did: a passing fault, tried again), or its error (a
    refusal: retrying as it is would not help)."""

    known: bool = False
    error: str | None = None
    failed: str | None = None

    def pending(self) -> str:
        return "not applied yet" + (f": {self.failed}" if self.failed else "")


def render(
    name: str,
    coordinator: LeaseCoordinator,
    snapshot: DurableState,
    generation: int | None,
    previous: list[Condition],
    problems: list[str],
    paused_by: str | None = None,
    children: Children | None = None,
    workers_health: WorkerHealth | None = None,
) -> StreamConsumerStatus:
    """`problems`: what keeps the consumer degraded (stream unreachable, status writes
    failing), most important first. `workers_health`: whether the workers' pods start
    (None: not observed yet)."""
    children = children or Children()
    not_starting = workers_health.not_starting() if workers_health is not None else None
    starting = workers_health.starting() if workers_health is not None else None
    leases = coordinator.status_leases()
    ready = coordinator.assignable()
    # A shard being handed off still has its owner: a planned move is not "unready".
    owned = sum(
        1
        for sid in ready
        if sid in coordinator.leases and coordinator.leases[sid].state in (ACTIVE, HANDOFF)
    )
    moving = sum(1 for lease in coordinator.leases.values() if lease.state is HANDOFF)
    held = Counter(lease.owner for lease in coordinator.leases.values() if lease.owner)
    workers = {
        worker: WorkerSummary(shards=held[worker], draining=progress.draining)
        for worker, progress in sorted(coordinator.workers.items())
    }
    lag = coordinator.lag_millis()
    by_type = {c.type: c for c in previous}
    blocked = coordinator.blocked_shards()
    stuck = coordinator.stuck_shards()
    still_held = sum(1 for lease in coordinator.leases.values() if lease.owner)
    unassigned = len(ready) - owned
    # Stalled (kstatus): what needs someone to act; Reconciling: work under way.
    stalled: tuple[str, str] | None = None
    if (replaced := coordinator.replaced_stream()) is not None:
        stalled = ("StreamRecreated", replaced)
    elif children.error is not None:
        stalled = ("ChildrenNotApplied", children.error)
    elif not_starting is not None:
        stalled = (WORKERS_NOT_STARTING, not_starting)
    elif blocked:
        more = f" (and {len(blocked) - 1} more)" if len(blocked) > 1 else ""
        stalled = ("ShardBlocked", blocked[0] + more)
    elif stuck:
        more = f" (and {len(stuck) - 1} more)" if len(stuck) > 1 else ""
        stalled = ("ShardStuck", stuck[0] + more)
    elif not coordinator.shards_known and problems:
        stalled = ("StreamUnavailable", problems[0])
    # Paused, or stopped for a stream created again: no shard is to be owned.
    stopped = coordinator.spec.paused or replaced is not None
    reconciling: tuple[str, str] | None = None
    if not children.known:
        reconciling = ("ApplyingChildren", f"applying the workers' objects: {children.pending()}")
    elif not coordinator.shards_known:
        reconciling = ("ListingShards", "listing shards")
    elif coordinator.spec.paused and still_held:
        reconciling = ("Pausing", f"{still_held} shards still held")
    elif moving:
        reconciling = ("HandingOff", f"{moving} shards being handed off")
    elif unassigned and not stopped and (workers or coordinator.spec.replicas):
        reconciling = ("ShardsUnassigned", f"{owned}/{len(ready)} assignable shards have an owner")
    elif starting is not None and not stopped:
        reconciling = ("StartingWorkers", starting)

    if coordinator.spec.paused and replaced is None:  # stopped for good says so first
        ready_condition = (
            _condition(
                by_type, "Ready", False, "Pausing", f"{still_held} shards still held", generation
            )
            if still_held
            else _condition(
                by_type,
                "Ready",
                True,
                "Paused",
                f"paused by {paused_by or 'unknown'}: shards wait at their checkpoints",
                generation,
            )
        )
    elif stalled is not None:
        ready_condition = _condition(by_type, "Ready", False, *stalled, generation)
    elif not coordinator.shards_known:
        ready_condition = _condition(
            by_type, "Ready", False, "ListingShards", "listing shards", generation
        )
    elif unassigned:
        message = f"{owned}/{len(ready)} assignable shards have an owner"
        reason = "NoWorkers" if not workers else "ShardsUnassigned"
        ready_condition = _condition(by_type, "Ready", False, reason, message, generation)
    else:
        message = f"{owned} shards owned by {len(workers)} workers"
        ready_condition = _condition(by_type, "Ready", True, "AllShardsOwned", message, generation)
    progressing = _condition(
        by_type,
        "Progressing",
        moving > 0,
        "HandingOff" if moving else "Stable",
        f"{moving} shards being handed off" if moving else "",
        generation,
    )
    degraded = _condition(
        by_type,
        "Degraded",
        bool(problems),
        "Unhealthy" if problems else "AsExpected",
        "; ".join(problems),
        generation,
    )
    if children.error is not None:
        applied = _condition(
            by_type, "ChildrenApplied", False, "Refused", children.error, generation
        )
    elif children.known:
        applied = _condition(
            by_type,
            "ChildrenApplied",
            True,
            "Applied",
            "the workers' objects are applied",
            generation,
        )
    else:
        applied = _condition(
            by_type, "ChildrenApplied", False, "Pending", children.pending(), generation
        )
    if workers_health is None:
        available = _condition(
            by_type,
            "WorkersAvailable",
            None,
            "NotObserved",
            "the workers' pods and Deployment not observed yet",
            generation,
        )
    elif not_starting is not None:
        available = _condition(
            by_type, "WorkersAvailable", False, WORKERS_NOT_STARTING, not_starting, generation
        )
    elif starting is not None:
        available = _condition(by_type, "WorkersAvailable", False, "Starting", starting, generation)
    else:
        replicas = workers_health.replicas
        counted = (
            f"{replicas.available}/{replicas.desired} worker pods available"
            if replicas is not None
            else "no worker pod failing to start"
        )
        available = _condition(by_type, "WorkersAvailable", True, "Available", counted, generation)
    conditions = [
        ready_condition,
        progressing,
        degraded,
        applied,
        available,
        _condition(
            by_type,
            "Reconciling",
            reconciling is not None,
            *(reconciling or ("Done", "")),
            generation,
        ),
        _condition(
            by_type, "Stalled", stalled is not None, *(stalled or ("Progressing", "")), generation
        ),
    ]
    return StreamConsumerStatus.model_validate(
        {
            **durable_fields(snapshot),
            "observedGeneration": generation,
            "replicas": sum(1 for w in workers.values() if not w.draining),
            "desiredReplicas": coordinator.desired_replicas,
            "labelSelector": label_selector(name),
            "shards": sum(1 for shard in coordinator.shards if not shard.closed),
            "lagMillis": max(lag.values()) if lag else None,
            "leases": leases,
            "pausedBy": paused_by if coordinator.spec.paused else None,
            "workers": workers,
            "conditions": conditions,
        }
    )


def term_of(status: dict[str, Any] | None) -> Term | None:
    term = (status or {}).get("term")
    return Term.model_validate(term) if term else None


# --- writing --------------------------------------------------------------------------


class Conflict(Exception):
    """409: the object changed since the resourceVersion we sent."""


class StatusInvalid(Exception):
    """400/422: the apiserver refuses this status (a schema violation, an oversize)."""


class StatusUnavailable(Exception):
    """5xx, throttling, a timeout or a broken connection: the write may or may not
    have landed."""


class Deposed(Exception):
    """A newer term fenced the status: this writer must never write again."""


class StaleState(Exception):
    """Someone else wrote a different lease table: ours is not the latest."""

    def __init__(self, current: dict[str, Any]) -> None:
        super().__init__("status was changed by another writer")
        self.current = current


class StatusApi(Protocol):
    def get(self) -> dict[str, Any]:
        """The StreamConsumer as stored."""
        ...

    def replace_status(self, body: dict[str, Any]) -> dict[str, Any]:
        """Replaces the status of `body` if the object is still at its resourceVersion;
        raises Conflict, StatusInvalid, StatusUnavailable."""
        ...


@dataclass
class Attempt:
    """One status write, prepared when its job starts: the resourceVersion it is
    conditional on is the one seen then, not when its thread gets round to it."""

    number: int
    status: dict[str, Any]
    resource_version: str | None


class Superseded(Exception):
    """A newer write was started: this one, abandoned by its caller, must not re-send."""


class StatusWriter:
    """Writes under the resourceVersion last seen, fenced by a term
    (docs/design.md#term-fence): its first write that lands raises the status' term
    number to one past what it read. A conflict is resolved by reading the object back:
    under our own term the table is ours (retry); under another term it is an older
    term's late write before our fence (StaleState: adopt it, fence again) or a newer
    term after it (Deposed: never write again). Only the newest attempt ever retries, so
    an abandoned one can never put an older table back. Attempts run on threads that may
    outlive their job's timeout: shared state is touched under a lock."""

    def __init__(self, api: StatusApi, namespace: str, name: str, holder: str) -> None:
        self.api = api
        self.namespace = namespace
        self.name = name
        self.holder = holder  # unique per process: two lives never share a term
        self.resource_version: str | None = None
        self.spec: dict[str, Any] = {}
        self.last_written: dict[str, Any] | None = None
        self.term: Term | None = None
        self.fenced = False
        self.writes = 0
        self._attempts = 0
        self._lock = threading.Lock()

    def adopt(self, body: dict[str, Any]) -> None:
        """Starts from the object as read (its status is the durable lease table)."""
        with self._lock:
            self._adopt(body)

    def _adopt(self, body: dict[str, Any]) -> None:
        self.resource_version = body["metadata"]["resourceVersion"]
        self.spec = body.get("spec", {})
        self.last_written = body.get("status")
        stored = term_of(self.last_written)
        if stored is not None and stored == self.term:
            self.fenced = True  # our fence landed although its answer was lost
        if not self.fenced:
            self.term = Term(number=stored.number + 1 if stored else 0, holder=self.holder)

    def prepare(self, status: dict[str, Any]) -> Attempt:
        """A write of `status` under our term, conditional on what we saw last."""
        with self._lock:
            assert self.term is not None, "adopt the object before writing"
            self._attempts += 1
            status = {**status, "term": self.term.wire()}
            return Attempt(self._attempts, status, self.resource_version)

    def write(self, status: dict[str, Any]) -> None:
        self.send(self.prepare(status))

    def send(self, attempt: Attempt) -> None:
        for _ in range(3):
            body = {
                "apiVersion": API_VERSION,
                "kind": KIND,
                "metadata": {
                    "name": self.name,
                    "namespace": self.namespace,
                    "resourceVersion": attempt.resource_version,
                },
                "spec": self.spec,
                "status": attempt.status,
            }
            try:
                written = self.api.replace_status(body)
            except Conflict:
                current = self.api.get()
                with self._lock:
                    attempt.resource_version = self._resolve(attempt, current)
                continue
            with self._lock:
                self.fenced = True  # our term is in the status now
                if attempt.number == self._attempts:
                    self.resource_version = written["metadata"]["resourceVersion"]
                    self.last_written = written.get("status")
                # else: an abandoned attempt landed late; the newest one meets it at its
                # conflict, sees our term, and carries on from there
                self.writes += 1
            return
        raise StatusUnavailable("status write kept conflicting")

    def _resolve(self, attempt: Attempt, current: dict[str, Any]) -> str | None:
        """After a conflict: the resourceVersion to retry under, or raise. Only this
        process writes under its term, so a stored table under it is ours (a spec edit
        moved the resourceVersion, or a write of ours landed unanswered): retry."""
        if attempt.number != self._attempts:
            raise Superseded(f"status write {attempt.number} was superseded")
        stored_term = term_of(current.get("status"))
        if stored_term != self.term:
            if self.fenced:
                raise Deposed(f"term {stored_term} fenced the status")
            if stored_term == term_of(self.last_written) and _table(current) == _table(
                {"status": self.last_written}
            ):
                # Nobody wrote a lease table since we read it (kopf's own metadata patches
                # moved the resourceVersion): ours stands. Adopting the stored one would
                # drop a table we start from on purpose (a new object's kept checkpoints).
                self.resource_version = current["metadata"]["resourceVersion"]
                self.spec = current.get("spec", {})
                return self.resource_version
            raise StaleState(current)  # an older term's write landed before our fence
        self._adopt(current)
        return self.resource_version


def _table(body: dict[str, Any]) -> tuple[Any, Any]:
    """The lease table a stored status holds (what a term's write puts there)."""
    status = body.get("status") or {}
    return status.get("leases") or {}, status.get("finishedShards") or []


class KubeStatusApi:
    """The StatusApi of one StreamConsumer on a Kubernetes apiserver."""

    def __init__(
        self, api_client: k8s.ApiClient, namespace: str, name: str, timeout: float = 10.0
    ) -> None:
        self._api = k8s.CustomObjectsApi(api_client)
        self._where = (GROUP, VERSION, namespace, PLURAL, name)
        self._timeout = timeout

    def get(self) -> dict[str, Any]:
        return cast(
            dict[str, Any],
            self._call(self._api.get_namespaced_custom_object, *self._where),
        )

    def replace_status(self, body: dict[str, Any]) -> dict[str, Any]:
        # A JSON patch, not a PUT: a PUT's object carries no annotations, and the
        # apiserver, though it keeps the stored ones, takes them from their owners in
        # managedFields (who asked for a pause was lost; an annotation a GitOps tool
        # applies would no longer be its own). A patch starts from the stored object.
        # The resourceVersion set in it is a precondition, as in a PUT: 409 if it moved.
        version = body["metadata"].get("resourceVersion")
        if version is None:  # the term fence needs every write conditional
            raise ValueError("a status write names the resourceVersion it replaces")
        patch = replacing(version, "/status", body["status"])
        return cast(
            dict[str, Any],
            self._call(
                self._api.patch_namespaced_custom_object_status,
                *self._where,
                patch,
                _content_type=JSON_PATCH,
            ),
        )

    def _call(self, method: Any, *args: Any, **options: Any) -> Any:
        try:
            return method(*args, _request_timeout=self._timeout, **options)
        except ApiException as error:
            if error.status == 409:
                raise Conflict(error.reason) from None
            if error.status in (400, 422):
                raise StatusInvalid(api_message(error)) from None
            raise StatusUnavailable(f"HTTP {error.status}: {error.reason}") from None
        except (HTTPError, OSError) as error:
            raise StatusUnavailable(str(error)) from None
