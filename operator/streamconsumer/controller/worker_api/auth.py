"""Who is calling the worker API: a projected ServiceAccount token, validated by the
apiserver's TokenReview. Pod-bound tokens carry the pod's name and UID, so a worker can
only speak for itself; the pod must be controlled, through its ReplicaSet and
Deployment, by the StreamConsumer it speaks to (uids checked at each step), so another
pod running as the workers' ServiceAccount is not a worker (docs/security.md#worker-identity).

TokenReviews cost the apiserver and run on their own small pool (`executors.AUTH`), so
junk must not reach them: a token that cannot be a projected ServiceAccount token meant
for us (`plausible`: shape, audience, expiry, subject; no signature check, TokenReview
does that) is refused at once; a refusal is remembered for a few seconds; each source
address may cost a few reviews a second (`ReviewBudget`), and only so many wait at once.
An acceptance is remembered for a while, but never past its pod's deletion
(`forget_pod`, from the pod watch)."""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
import math
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

from kubernetes import client as k8s
from kubernetes.client.exceptions import ApiException
from urllib3.exceptions import HTTPError

from streamconsumer.controller import executors, metrics
from streamconsumer.controller.names import worker_deployment, worker_service_account
from streamconsumer.controller.worker_api.caller import Caller
from streamconsumer.models import API_VERSION, GROUP, KIND, PLURAL, VERSION

AUDIENCE = "streamconsumer.io"
_POD_NAME = "authentication.kubernetes.io/pod-name"
_POD_UID = "authentication.kubernetes.io/pod-uid"
MAX_TOKEN_CHARS = 16 * 1024  # projected tokens are about 1 KiB
ACCEPTANCE_TTL_SECONDS = 120.0  # how long an accepted token is taken without a review
REFUSAL_TTL_SECONDS = 2.0  # short: a pod's token may be refused while the pod is created
CLOCK_SKEW_SECONDS = 60.0  # our clock may lag the apiserver's that issued the token


def _claims(token: str) -> dict[str, Any] | None:
    """A JWT's payload, unverified; None if it is not one."""
    parts = token.split(".")
    if len(token) > MAX_TOKEN_CHARS or len(parts) != 3:
        return None
    try:
        payload = base64.urlsafe_b64decode(parts[1] + "=" * (-len(parts[1]) % 4))
        claims = json.loads(payload)
    except (binascii.Error, ValueError, RecursionError):
        return None
    return claims if isinstance(claims, dict) else None


def expiry(token: str) -> float:
    """When the token expires (epoch seconds, its `exp`, unverified; -inf if it says none)."""
    exp = (_claims(token) or {}).get("exp")
    return float(exp) if isinstance(exp, int | float) else -math.inf


def plausible(token: str, audience: str, now: float) -> bool:
    """Whether `token` may be a ServiceAccount token meant for `audience` and valid at
    `now` (epoch seconds): what TokenReview would refuse anyway is refused here, at no
    cost to the apiserver. (A token not bound to a pod is refused later, 403: it cannot
    speak for any worker.)"""
    claims = _claims(token)
    if claims is None:
        return False
    aud = claims.get("aud")
    audiences = aud if isinstance(aud, list) else [aud]
    exp = claims.get("exp")
    subject = str(claims.get("sub", "")).split(":")
    return (
        audience in audiences
        and isinstance(exp, int | float)
        and exp + CLOCK_SKEW_SECONDS > now
        and len(subject) == 4
        and subject[:2] == ["system", "serviceaccount"]
    )


class ReviewUnavailable(Exception):
    """The apiserver could not review the token now; the caller should retry."""


class TooManyReviews(ReviewUnavailable):
    """This source asked for more reviews than its budget; it may retry after a while."""

    def __init__(self, retry_after: float) -> None:
        super().__init__(f"too many new tokens from this address; retry in {retry_after:.0f} s")
        self.retry_after = retry_after


@dataclass(frozen=True)
class WorkerOf:
    """The StreamConsumer controlling a pod, and the ServiceAccount its spec has its
    workers run as (`processor.serviceAccountName`, else `<name>-worker`)."""

    consumer: str
    service_account: str


class PodOwners(Protocol):
    def consumer_of(self, namespace: str, pod_name: str, pod_uid: str) -> WorkerOf | None:
        """The StreamConsumer controlling this pod (by this UID), or None; raises
        ReviewUnavailable if the apiserver cannot say now."""


def _controlled(obj: Any, uid: str, api_version: str, kind: str) -> Any:
    """The controller reference (a V1OwnerReference) of this kind and group on `obj` if
    `obj` has this uid; None if not (replaced since it was named, or controlled by
    something else). A kind of another API group is something else."""
    meta = obj.metadata
    if meta is None or meta.uid != uid:
        return None
    group = api_version.split("/")[0]
    return next(
        (
            ref
            for ref in meta.owner_references or []
            if ref.controller and ref.kind == kind and ref.api_version.split("/")[0] == group
        ),
        None,
    )


@dataclass(frozen=True)
class KubePodOwners:
    """Pod → ReplicaSet → Deployment → StreamConsumer, by controller references (kind and
    API group), each object read and its uid compared with the reference that named it.

    What this cannot tell: a pod someone made with labels the ReplicaSet selects is
    adopted by it, and a pod being deleted keeps its token valid for its grace period;
    both need the right to create or keep pods in the namespace, which is already the
    right to run any code as the workers' ServiceAccount (docs/security.md#worker-identity)."""

    core: k8s.CoreV1Api
    apps: k8s.AppsV1Api
    custom: k8s.CustomObjectsApi
    timeout: float = 5.0

    @classmethod
    def of(cls, api_client: k8s.ApiClient) -> KubePodOwners:
        return cls(
            k8s.CoreV1Api(api_client), k8s.AppsV1Api(api_client), k8s.CustomObjectsApi(api_client)
        )

    def consumer_of(self, namespace: str, pod_name: str, pod_uid: str) -> WorkerOf | None:
        core, apps, custom, timeout = self.core, self.apps, self.custom, self.timeout
        try:
            pod = core.read_namespaced_pod(pod_name, namespace, _request_timeout=timeout)
            by = _controlled(pod, pod_uid, "apps/v1", "ReplicaSet")
            if by is None:
                return None
            replica_set = apps.read_namespaced_replica_set(
                by.name, namespace, _request_timeout=timeout
            )
            by = _controlled(replica_set, by.uid, "apps/v1", "Deployment")
            if by is None:
                return None
            deployment_name = by.name
            deployment = apps.read_namespaced_deployment(
                by.name, namespace, _request_timeout=timeout
            )
            by = _controlled(deployment, by.uid, API_VERSION, KIND)
            if by is None or deployment_name != worker_deployment(by.name):
                return None
            consumer = custom.get_namespaced_custom_object(
                GROUP, VERSION, namespace, PLURAL, by.name, _request_timeout=timeout
            )
        except ApiException as error:
            if error.status == 404:  # gone, or never there: not a worker
                return None
            raise ReviewUnavailable(f"reading the caller's pod: HTTP {error.status}") from None
        except (HTTPError, OSError) as error:
            raise ReviewUnavailable(f"reading the caller's pod: {type(error).__name__}") from None
        if not isinstance(consumer, dict) or consumer.get("metadata", {}).get("uid") != by.uid:
            return None  # a namesake: not the StreamConsumer the Deployment belongs to
        processor = (consumer.get("spec") or {}).get("processor") or {}
        named = processor.get("serviceAccountName")
        account = worker_service_account(by.name, named if isinstance(named, str) else None)
        return WorkerOf(str(by.name), account)


@dataclass(eq=False)
class ReviewBudget:
    """A token bucket per source address: `burst` reviews at once, then `rate` a second.
    The least recently used buckets go first past `max_sources` (an address back after
    that starts full again: the overall budget still holds)."""

    rate: float = 5.0
    burst: float = 20.0
    max_sources: int = 10_000
    _buckets: OrderedDict[str, tuple[float, float]] = field(default_factory=OrderedDict, init=False)

    @property
    def sources(self) -> int:
        """How many addresses it holds a bucket for."""
        return len(self._buckets)

    def take(self, source: str, now: float) -> float:
        """0 if `source` may have a review now (and it is counted), else the seconds
        until it may."""
        tokens, at = self._buckets.pop(source, (self.burst, now))
        tokens = min(self.burst, tokens + (now - at) * self.rate)
        wait = 0.0 if tokens >= 1.0 else (1.0 - tokens) / self.rate
        self._buckets[source] = (tokens - 1.0 if wait == 0.0 else tokens, now)
        while len(self._buckets) > self.max_sources:
            self._buckets.popitem(last=False)
        return wait


ALL_SOURCES = ""  # the overall budget's key


MAX_PENDING_REVIEWS = 64  # more waiting than this: 503 at once, not a longer queue


@dataclass(eq=False)
class TokenReviewer:
    """TokenReview with a short cache of accepted tokens, so steady heartbeats cost the
    apiserver little, and a shorter one of refusals; implausible tokens never reach it.
    `wall_clock` judges the tokens' expiry, `clock` the caches and budgets."""

    api: k8s.AuthenticationV1Api
    owners: PodOwners
    audience: str = AUDIENCE
    # As the apiserver's own webhook token cache (--authentication-token-webhook-cache-ttl,
    # 2 minutes): at 30 s, 400 workers needed 13 reviews a second, more than an apiserver
    # on 2 loaded cores answered (bench-many). Never past the pod's deletion nor the
    # token's expiry.
    ttl: float = ACCEPTANCE_TTL_SECONDS
    timeout: float = 5.0
    refusal_ttl: float = REFUSAL_TTL_SECONDS
    budget: ReviewBudget = field(default_factory=ReviewBudget)
    # All sources together: many addresses must not add up to a flood either. A worker
    # pod costs about one review per `ttl`: 100 a second is 12,000 pods.
    overall: ReviewBudget = field(default_factory=lambda: ReviewBudget(rate=100.0, burst=200.0))
    max_pending: int = MAX_PENDING_REVIEWS
    max_refusals: int = 10_000
    clock: Callable[[], float] = time.monotonic
    wall_clock: Callable[[], float] = time.time
    # By the token's digest (a token may be 16 KiB): accepted ones, and refused ones
    # apart, so refusals never push an acceptance out.
    _accepted: dict[bytes, tuple[float, Caller, float]] = field(default_factory=dict, init=False)
    _refused: OrderedDict[bytes, float] = field(default_factory=OrderedDict, init=False)
    _deleted: dict[str, float] = field(default_factory=dict, init=False)  # pod uid -> when
    _pending: int = field(default=0, init=False)

    async def review(self, token: str, source: str = "") -> Caller | None:
        """The caller, None if the token is refused; raises ReviewUnavailable (or
        TooManyReviews, for `source`, the caller's address)."""
        now = self.clock()
        key = hashlib.sha256(token.encode()).digest()
        accepted = self._accepted.get(key)
        if accepted is not None:
            taken_at, known, expires = accepted
            if now - taken_at < self.ttl and self.wall_clock() < expires:
                return known
        refused_at = self._refused.get(key)
        if refused_at is not None and now - refused_at < self.refusal_ttl:
            return None
        if not plausible(token, self.audience, self.wall_clock()):
            return None
        wait = self.budget.take(source, now)
        if wait > 0:
            raise TooManyReviews(wait)
        wait = self.overall.take(ALL_SOURCES, now)
        if wait > 0:
            raise TooManyReviews(wait)
        if self._pending >= self.max_pending:
            raise ReviewUnavailable("too many tokens waiting for review")
        self._pending += 1
        try:
            caller = await executors.run_in(executors.AUTH, lambda: self._review(token))
        finally:
            self._pending -= 1
        self._sweep(now)
        if caller is not None and caller.pod_uid in self._deleted:
            caller = None  # its pod was deleted while the review was under way
        if caller is None:
            self._refused[key] = now
            while len(self._refused) > self.max_refusals:
                self._refused.popitem(last=False)
        else:
            self._accepted[key] = (now, caller, expiry(token))
        return caller

    def forget_pod(self, pod_uid: str) -> None:
        """The pod is gone: its tokens are refused from now on, cached or under review."""
        self._deleted[pod_uid] = self.clock()
        self._accepted = {k: v for k, v in self._accepted.items() if v[1].pod_uid != pod_uid}

    def _sweep(self, now: float) -> None:
        """Drops what can no longer matter: expired acceptances, deletions older than any
        review still under way."""
        if len(self._accepted) > 1000:
            self._accepted = {k: v for k, v in self._accepted.items() if now - v[0] < self.ttl}
        horizon = self.timeout * 3 + self.ttl
        if len(self._deleted) > 100:
            self._deleted = {u: at for u, at in self._deleted.items() if now - at < horizon}

    def _review(self, token: str) -> Caller | None:
        metrics.TOKEN_REVIEWS.inc()
        body = k8s.V1TokenReview(spec=k8s.V1TokenReviewSpec(token=token, audiences=[self.audience]))
        try:
            status = self.api.create_token_review(body, _request_timeout=self.timeout).status
        except ApiException as error:  # its text holds the apiserver's headers and body
            raise ReviewUnavailable(f"TokenReview failed: HTTP {error.status}") from None
        except (HTTPError, OSError) as error:
            raise ReviewUnavailable(f"TokenReview failed: {type(error).__name__}") from None
        if status is None or not status.authenticated or status.user is None:
            return None
        # An authenticator that ignores audiences would accept any token of the cluster:
        # the review must say the token is meant for us.
        if self.audience not in (status.audiences or []):
            return None
        parts = (status.user.username or "").split(":")
        if len(parts) != 4 or parts[:2] != ["system", "serviceaccount"]:
            return None
        extra = status.user.extra or {}
        pod_name = next(iter(extra.get(_POD_NAME) or []), None)
        pod_uid = next(iter(extra.get(_POD_UID) or []), None)
        owner = None
        if pod_name is not None and pod_uid is not None:
            owner = self.owners.consumer_of(parts[2], pod_name, pod_uid)
        if owner is None:
            return Caller(parts[2], parts[3], pod_name, pod_uid)
        return Caller(parts[2], parts[3], pod_name, pod_uid, owner.consumer, owner.service_account)
