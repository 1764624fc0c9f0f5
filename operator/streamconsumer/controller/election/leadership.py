"""One active operator among replicas: the election (core/election.py) driven against a
coordination.k8s.io/v1 Lease, and the pod label the worker API's Service selects, so
workers only ever reach the leader.

Readiness does not follow leadership on purpose: a standby that never became Ready would
stall every RollingUpdate (the new pods wait for the old leader to go, the old leader
waits for the new pods to be Ready). Both replicas are Ready; the Service selects the
pod labelled leader."""

from __future__ import annotations

import asyncio
import contextlib
import copy
import datetime
import functools
import json
import logging
import math
import threading
from collections.abc import Callable
from typing import Any, Protocol, cast

from kubernetes import client as k8s
from kubernetes.client.exceptions import ApiException
from urllib3.exceptions import HTTPError

from streamconsumer.controller import executors
from streamconsumer.controller.consumer.jobs import Job, Jobs, Outcome, ThreadJobs
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
        self._read: dict[str, Any] | None = None  # the Lease as last read

    def get(self) -> LeaseRecord | None:
        try:
            response: Any = self._api.read_namespaced_lease(
                self.name, self.namespace, _request_timeout=self._timeout, _preload_content=False
            )
        except ApiException as error:
            if error.status == 404:
                self._read = None
                return None
            raise
        lease = json.loads(response.data)
        self._read = lease
        spec = lease.get("spec") or {}
        return LeaseRecord(
            holder=spec.get("holderIdentity") or None,
            lease_seconds=float(spec.get("leaseDurationSeconds") or 0),
            transitions=spec.get("leaseTransitions") or 0,
            version=lease["metadata"]["resourceVersion"],
        )

    def swap(self, action: Action, holder: str | None, lease_seconds: float) -> LeaseRecord:
        now = _micro_time(datetime.datetime.now(datetime.UTC))
        spec: dict[str, Any] = {
            "holderIdentity": holder,
            # Whole seconds, rounded up: a shorter recorded lease would let a standby
            # take over before the holder's renew deadline has passed.
            "leaseDurationSeconds": max(1, math.ceil(lease_seconds)),
            "leaseTransitions": action.transitions,
            "renewTime": now,
        }
        if action.act is not Act.RENEW:
            spec["acquireTime"] = now
        # Plain JSON, not V1Lease: MicroTime must keep its fraction (see _micro_time).
        try:
            if action.act is Act.CREATE:
                body: Any = {
                    "apiVersion": "coordination.k8s.io/v1",
                    "kind": "Lease",
                    "metadata": {"name": self.name, "namespace": self.namespace},
                    "spec": spec,
                }
                written = self._api.create_namespaced_lease(
                    self.namespace, body, _request_timeout=self._timeout
                )
            else:
                # The Lease as read with our spec, conditional on the version the action
                # was decided on (409 if it moved): a bare object would drop the labels,
                # annotations and owners others put on it at every renewal. A PUT, not a
                # patch: this release and the previous one need the same verbs while both
                # run during an upgrade (docs/upgrades.md, the operator's rights).
                read = self._read
                if read is None or read["metadata"]["resourceVersion"] != action.expected_version:
                    # A late read (a timed-out job's thread finishing) replaced the one
                    # the action was decided on: read again rather than send its labels.
                    raise LockConflict("the Lease read last is not the one decided on")
                body = copy.deepcopy(read)
                body["metadata"].pop("managedFields", None)  # the apiserver keeps its own
                body["spec"] = spec
                written = self._api.replace_namespaced_lease(
                    self.name,
                    self.namespace,
                    body,
                    _request_timeout=self._timeout,
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


class ElectionDriver:
    """One replica's campaign and renewals: read the record, let the Election decide,
    swap, report. It never blocks: the lock's calls are jobs (docs/design.md#one-driver),
    so production (threads) and the simulation (its event queue) run this same code.
    Never raises on I/O: a failing apiserver just lets the term run out."""

    def __init__(
        self,
        lock: LeaseLock,
        election: Election,
        jobs: Jobs,
        clock: Callable[[], float],
        changed: Callable[[], None],
        timeout: float,
    ) -> None:
        self._lock = lock
        self.election = election
        self._jobs = jobs
        self._clock = clock
        self._changed = changed  # leading or lost may have changed: look again
        self._timeout = timeout
        self._busy = False
        self._next_round_at = -float("inf")

    @property
    def identity(self) -> str:
        return self.election.identity

    def leading(self) -> bool:
        return self.election.leading(self._clock())

    def lost(self) -> bool:
        return self.election.lost(self._clock())

    def tick(self) -> None:
        """Starts the next round if it is due and none is under way."""
        if self._busy or self.lost() or self._clock() < self._next_round_at:
            return
        self._busy = True
        self._jobs.start(Job("lease-read", self._lock.get, self._call_timeout(), self._read))

    def until_due(self) -> float:
        """Seconds until `tick` has something to do (a round under way: its timeout)."""
        if self._busy:
            return self._call_timeout()
        return max(0.0, self._next_round_at - self._clock())

    def _call_timeout(self) -> float:
        """A leader waits on a slow apiserver for as long as its term has left (as
        client-go's renewal does): a renewal that lands late still counts from when it
        was sent, and a call abandoned sooner would end a term the apiserver could
        still have renewed. A candidate gives up after `timeout`."""
        return max(self._timeout, self.election.term_left(self._clock()))

    def _read(self, outcome: Outcome[LeaseRecord | None]) -> None:
        if self.lost():
            self._done()  # the term ended while the read was out: no renewal after it
            return
        try:
            record = outcome.result()
        except Exception as error:  # the apiserver, the network, a timeout
            self._failed(error)
            return
        self.election.observe(record, self._clock())
        action = self.election.next_action(self._clock())
        if action.act is Act.WAIT:
            self._done()
            return
        sent_at = self._clock()
        swap = functools.partial(
            self._lock.swap, action, self.identity, self.election.timing.lease_seconds
        )
        swapped = functools.partial(self._swapped, action, sent_at)
        self._jobs.start(Job("lease-swap", swap, self._call_timeout(), swapped))

    def _swapped(self, action: Action, sent_at: float, outcome: Outcome[LeaseRecord]) -> None:
        try:
            written = outcome.result()
        except Exception as error:  # a conflict, or no answer: read again to know
            self._failed(error)
            return
        was_leading = self.leading()
        self.election.swapped(action, written, sent_at, self._clock())
        if self.leading() and not was_leading:
            log.warning("%s leads now (term %s)", self.identity, self.election.term)
        self._done()

    def _failed(self, error: BaseException) -> None:
        if not isinstance(error, LockConflict):
            log.info("leader election: %s", str(error) or type(error).__name__)
        self.election.swap_failed(Action(Act.WAIT))
        self._done()

    def _done(self) -> None:
        self._busy = False
        # The next round after the election's pause; a leader also wakes when its term
        # would run out, so that `lost` is seen at once.
        now = self._clock()
        pause = self.election.wait_seconds(now)
        if self.election.leading(now):
            pause = min(pause, self.election.term_left(now))
        self._next_round_at = now + pause
        self._changed()


class Elector:
    """The production host of an ElectionDriver, on a thread and asyncio loop of its own:
    the operator's loop runs every consumer, and at a few hundred of them it can lag
    seconds behind, which must never let a term lapse (client-go's elector, like KCL's
    lease renewer, runs apart for the same reason). Its lock calls run on the election's
    thread pool. The operator's loop reads `leading`/`lost` and awaits `next_change`;
    the driver's state is only ever touched under one lock."""

    def __init__(
        self,
        lock: LeaseLock,
        election: Election,
        clock: Callable[[], float],
    ) -> None:
        self._lock = lock
        self._clock = clock
        self._guard = threading.Lock()  # the driver's state: its thread, and the caller's
        self._resigning = False
        self._campaign: threading.Thread | None = None
        self._loop: asyncio.AbstractEventLoop | None = None  # the election's own
        self._woken: asyncio.Event | None = None  # on the election's loop: run() wakes
        self._caller: asyncio.AbstractEventLoop | None = None  # the operator's
        self._changed: asyncio.Event | None = None  # on the operator's loop
        self._timeout = election.timing.retry_seconds + 1.0  # the lock's own, and a margin
        self._thread_jobs = ThreadJobs(executors.ELECTION, self._notify)
        jobs = _Guarded(self._thread_jobs, self._guard)
        self.driver = ElectionDriver(lock, election, jobs, clock, self._notify, self._timeout)

    @property
    def identity(self) -> str:
        return self.driver.identity

    def leading(self) -> bool:
        with self._guard:
            return self.driver.leading()

    def lost(self) -> bool:
        with self._guard:
            return self.driver.lost()

    def start(self) -> None:
        """Campaigns, then renews, on the election's thread, until the term is over or
        `resign`/`stop`. Call from the operator's loop: changes are reported to it."""
        self._caller = asyncio.get_running_loop()
        self._changed = asyncio.Event()
        started = threading.Event()
        self._campaign = threading.Thread(
            target=lambda: asyncio.run(self._run(started)), name="election", daemon=True
        )
        self._campaign.start()
        started.wait()

    async def stop(self) -> None:
        """Ends the campaign (the process is exiting); a term still running just lapses."""
        self._resigning = True
        self._wake()
        if self._campaign is not None:
            await asyncio.to_thread(self._campaign.join, self._timeout + 1.0)

    async def _run(self, started: threading.Event) -> None:
        self._loop = asyncio.get_running_loop()
        self._woken = asyncio.Event()
        started.set()
        try:
            while not self._resigning and not self.lost():
                with self._guard:
                    self.driver.tick()
                    due = self.driver.until_due()
                self._woken.clear()
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._woken.wait(), due)
        finally:
            self._thread_jobs.cancel()
            self._report()  # wake next_change: the campaign is over

    def _notify(self) -> None:
        """Something changed (on the election's loop): run again, and tell the caller."""
        if self._woken is not None:
            self._woken.set()
        self._report()

    def _report(self) -> None:
        caller, changed = self._caller, self._changed
        if caller is not None and changed is not None:
            with contextlib.suppress(RuntimeError):  # the operator's loop closed: exiting
                caller.call_soon_threadsafe(changed.set)

    def _wake(self) -> None:
        loop, woken = self._loop, self._woken
        if loop is not None and woken is not None:
            with contextlib.suppress(RuntimeError):  # its loop is over already
                loop.call_soon_threadsafe(woken.set)

    async def until_leading(self) -> None:
        """Returns once leading, or once the campaign is over (a term won and lost before
        anyone looked: the lifecycle ends it)."""
        while not self.leading() and not self.lost():
            await self.next_change()

    async def next_change(self) -> None:
        """Returns after the next round (or the end of the campaign)."""
        assert self._changed is not None, "start() first"
        self._changed.clear()
        await self._changed.wait()

    async def resign(self) -> None:
        """Steps down now (a rolling upgrade): frees the Lease so a standby takes over at
        its next read rather than after a whole lease duration."""
        self._resigning = True
        self._wake()
        with self._guard:
            if not self.driver.leading():
                return
            self.driver.election.resigned()
        try:
            record = await executors.run_in(executors.ELECTION, self._lock.get)
            if record is not None and record.holder == self.identity:
                action = Action(Act.ACQUIRE, record.version, record.transitions)
                free = functools.partial(self._lock.swap, action, None, 1.0)
                await executors.run_in(executors.ELECTION, free)
                log.info("%s: the lease is free", self.identity)
        except (LockConflict, ApiException, HTTPError, OSError) as error:
            log.info("leader election: could not free the lease: %s", error)
        if self._changed is not None:
            self._changed.set()


class _Guarded:
    """Jobs whose outcomes reach the driver under `guard` (they arrive on the election's
    loop while the operator's loop may be reading the driver)."""

    def __init__(self, jobs: Jobs, guard: threading.Lock) -> None:
        self._jobs = jobs
        self._guard = guard

    def start(self, job: Job[Any]) -> None:
        def done(outcome: Outcome[Any]) -> None:
            with self._guard:
                job.done(outcome)

        self._jobs.start(Job(job.kind, job.call, job.timeout, done))


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
