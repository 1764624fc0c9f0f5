"""One active operator among replicas: the election (core/election.py) driven against a
coordination.k8s.io/v1 Lease, and the pod label the worker API's Service selects, so
workers only ever reach the leader.

Readiness does not follow leadership on purpose: a standby that never became Ready would
stall every RollingUpdate (the new pods wait for the old leader to go, the old leader
waits for the new pods to be Ready). Both replicas are Ready; the Service selects the
pod labelled leader."""

from __future__ import annotations

import asyncio
import datetime
import functools
import logging
from collections.abc import Callable
from typing import Any, Protocol, cast

from kubernetes import client as k8s
from kubernetes.client.exceptions import ApiException
from urllib3.exceptions import HTTPError

from streamconsumer.controller import executors
from streamconsumer.core.election import Act, Action, Election, LeaseRecord

log = logging.getLogger(__name__)

# The label on the leading operator pod; the chart's Service selects it.
LEADER_LABEL = "streamconsumer.io/leader"


class LockConflict(Exception):
    """Someone else wrote the record first."""


class LeaseLock(Protocol):
    def get(self) -> LeaseRecord | None: ...

    def swap(self, action: Action, holder: str | None, lease_seconds: float) -> LeaseRecord:
        """Writes the record if it is still `action.expected_version`; raises LockConflict."""
        ...


def _micro_time(moment: datetime.datetime) -> str:
    # MicroTime wants the fraction always; isoformat() drops it at whole seconds.
    return moment.astimezone(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


class KubeLeaseLock:
    def __init__(
        self, api_client: k8s.ApiClient, namespace: str, name: str, timeout: float
    ) -> None:
        self._api = k8s.CoordinationV1Api(api_client)
        self.namespace = namespace
        self.name = name
        self._timeout = timeout

    def get(self) -> LeaseRecord | None:
        try:
            lease = self._api.read_namespaced_lease(
                self.name, self.namespace, _request_timeout=self._timeout
            )
        except ApiException as error:
            if error.status == 404:
                return None
            raise
        spec = lease.spec or k8s.V1LeaseSpec()
        return LeaseRecord(
            holder=spec.holder_identity or None,
            lease_seconds=float(spec.lease_duration_seconds or 0),
            transitions=spec.lease_transitions or 0,
            version=_resource_version(lease),
        )

    def swap(self, action: Action, holder: str | None, lease_seconds: float) -> LeaseRecord:
        now = _micro_time(datetime.datetime.now(datetime.UTC))
        spec: dict[str, Any] = {
            "holderIdentity": holder,
            "leaseDurationSeconds": max(1, round(lease_seconds)),
            "leaseTransitions": action.transitions,
            "renewTime": now,
        }
        if action.act is not Act.RENEW:
            spec["acquireTime"] = now
        # A plain body, not V1Lease: MicroTime must keep its fraction (see _micro_time).
        body: Any = {
            "apiVersion": "coordination.k8s.io/v1",
            "kind": "Lease",
            "metadata": {"name": self.name, "namespace": self.namespace},
            "spec": spec,
        }
        try:
            if action.act is Act.CREATE:
                written = self._api.create_namespaced_lease(
                    self.namespace, body, _request_timeout=self._timeout
                )
            else:
                body["metadata"]["resourceVersion"] = action.expected_version
                written = self._api.replace_namespaced_lease(
                    self.name, self.namespace, body, _request_timeout=self._timeout
                )
        except ApiException as error:
            if error.status == 409:
                raise LockConflict(str(error.reason)) from error
            raise
        return LeaseRecord(
            holder=holder,
            lease_seconds=float(spec["leaseDurationSeconds"]),
            transitions=action.transitions,
            version=_resource_version(written),
        )


def _resource_version(lease: k8s.V1Lease) -> str:
    return cast(str, lease.metadata.resource_version if lease.metadata else "")


class Elector:
    """Drives an Election against a lock from asyncio; the lock's calls run in threads."""

    def __init__(
        self,
        lock: LeaseLock,
        election: Election,
        clock: Callable[[], float],
    ) -> None:
        self._lock = lock
        self._election = election
        self._clock = clock
        self._changed = asyncio.Event()
        self._resigning = False

    @property
    def identity(self) -> str:
        return self._election.identity

    def leading(self) -> bool:
        return self._election.leading(self._clock())

    def lost(self) -> bool:
        return self._election.lost(self._clock())

    async def until_leading(self) -> None:
        while not self.leading():
            await self._next_change()

    async def until_lost(self) -> None:
        while not self.lost():
            await self._next_change()

    async def _next_change(self) -> None:
        self._changed.clear()
        await self._changed.wait()

    async def run(self) -> None:
        """Campaigns, then renews, until the term is lost, or resigned, or cancelled.
        Never raises on I/O: a failing apiserver just lets the term run out."""
        timing = self._election.timing
        while not self._resigning and not self.lost():
            was_leading = self.leading()
            try:
                record = await executors.run_in(executors.ELECTION, self._lock.get)
                self._election.observe(record, self._clock())
                action = self._election.next_action(self._clock())
                if action.act is not Act.WAIT:
                    sent_at = self._clock()
                    written = await executors.run_in(
                        executors.ELECTION,
                        functools.partial(
                            self._lock.swap, action, self.identity, timing.lease_seconds
                        ),
                    )
                    self._election.swapped(action, written, sent_at, self._clock())
                    if action.act is not Act.RENEW:
                        log.warning("%s leads now (lease %s)", self.identity, written.version)
            except LockConflict:
                self._election.swap_failed(Action(Act.WAIT))
            except (ApiException, HTTPError, OSError) as error:
                log.info("leader election: %s", error)
                self._election.swap_failed(Action(Act.WAIT))
            if was_leading != self.leading() or self.lost():
                self._changed.set()
            # Wake exactly when the term would run out, so `lost` is seen at once.
            pause = self._election.wait_seconds(self._clock())
            if self.leading():
                pause = min(pause, self._election.term_left(self._clock()))
            await asyncio.sleep(pause)
            if self.lost():
                self._changed.set()

    async def resign(self) -> None:
        """Steps down now (a rolling upgrade): frees the Lease so a standby takes over at
        its next read rather than after a whole lease duration."""
        self._resigning = True
        if not self.leading():
            return
        self._election.resigned()
        try:
            record = await executors.run_in(executors.ELECTION, self._lock.get)
            if record is not None and record.holder == self.identity:
                action = Action(Act.ACQUIRE, record.version, record.transitions)
                await executors.run_in(
                    executors.ELECTION, lambda: self._lock.swap(action, None, 1.0)
                )
        except (LockConflict, ApiException, HTTPError, OSError) as error:
            log.info("leader election: could not free the lease: %s", error)
        self._changed.set()


class LeaderLabel:
    """Puts LEADER_LABEL on our pod, and takes it off any other pod that still has it (a
    leader that lost its Lease without being able to say so)."""

    def __init__(self, api_client: k8s.ApiClient, namespace: str, pod_name: str) -> None:
        self._api = k8s.CoreV1Api(api_client)
        self.namespace = namespace
        self.pod_name = pod_name

    def claim(self) -> None:
        stale = self._api.list_namespaced_pod(
            self.namespace, label_selector=f"{LEADER_LABEL}=true", _request_timeout=10
        )
        for pod in stale.items:
            name = pod.metadata.name if pod.metadata else None
            if name and name != self.pod_name:
                self._set(name, None)
        self._set(self.pod_name, "true")

    def drop(self) -> None:
        self._set(self.pod_name, None)

    def _set(self, pod: str, value: str | None) -> None:
        patch = {"metadata": {"labels": {LEADER_LABEL: value}}}
        try:
            self._api.patch_namespaced_pod(pod, self.namespace, patch, _request_timeout=10)
        except ApiException as error:
            if error.status != 404:  # a pod gone is a pod without the label
                raise
