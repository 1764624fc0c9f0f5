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
import json
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

from kubernetes import client as k8s
from kubernetes.client.exceptions import ApiException
from urllib3.exceptions import HTTPError

from streamconsumer.controller import executors, metrics
from streamconsumer.controller.names import worker_deployment

AUDIENCE = "streamconsumer.io"
_POD_NAME = "authentication.kubernetes.io/pod-name"
_POD_UID = "authentication.kubernetes.io/pod-uid"
MAX_TOKEN_CHARS = 16 * 1024  # projected tokens are about 1 KiB
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


@dataclass(frozen=True)
class Caller:
    namespace: str
    service_account: str
    pod_name: str | None
    pod_uid: str | None = None
    # The StreamConsumer whose workers' Deployment controls the pod; None if none does.
    consumer: str | None = None


class ReviewUnavailable(Exception):
    """The apiserver could not review the token now; the caller should retry."""


class TooManyReviews(ReviewUnavailable):
    """This source asked for more reviews than its budget; it may retry after a while."""

    def __init__(self, retry_after: float) -> None:
        super().__init__(f"too many new tokens from this address; retry in {retry_after:.0f} s")
        self.retry_after = retry_after


class PodOwners(Protocol):
    def consumer_of(self, namespace: str, pod_name: str, pod_uid: str) -> str | None:
        """The StreamConsumer controlling this pod (by this UID), or None; raises
        ReviewUnavailable if the apiserver cannot say now."""


def _controlled(obj: Any, uid: str, kind: str) -> Any:
    """The controller reference of this kind on `obj` (a V1OwnerReference) if `obj` has
    this uid; None if not (replaced since it was named, or controlled otherwise)."""
    meta = obj.metadata
    if meta is None or meta.uid != uid:
        return None
    refs = meta.owner_references or []
    return next((r for r in refs if r.controller and r.kind == kind), None)


@dataclass(frozen=True)
class KubePodOwners:
    """Pod → ReplicaSet → Deployment → StreamConsumer, by controller references, each
    object's uid compared with the reference that named it."""

    api_client: k8s.ApiClient
    timeout: float = 5.0

    def consumer_of(self, namespace: str, pod_name: str, pod_uid: str) -> str | None:
        core, apps = k8s.CoreV1Api(self.api_client), k8s.AppsV1Api(self.api_client)
        timeout = self.timeout
        try:
            pod = core.read_namespaced_pod(pod_name, namespace, _request_timeout=timeout)
            by = _controlled(pod, pod_uid, "ReplicaSet")
            if by is not None:
                replica_set = apps.read_namespaced_replica_set(
                    by.name, namespace, _request_timeout=timeout
                )
                by = _controlled(replica_set, by.uid, "Deployment")
            if by is not None:
                deployment = apps.read_namespaced_deployment(
                    by.name, namespace, _request_timeout=timeout
                )
                name = by.name
                by = _controlled(deployment, by.uid, "StreamConsumer")
        except ApiException as error:
            if error.status == 404:  # gone, or never there: not a worker
                return None
            raise ReviewUnavailable(f"reading the caller's pod: HTTP {error.status}") from None
        except (HTTPError, OSError) as error:
            raise ReviewUnavailable(f"reading the caller's pod: {type(error).__name__}") from None
        if by is None or name != worker_deployment(by.name):
            return None
        return str(by.name)


@dataclass(eq=False)
class ReviewBudget:
    """A token bucket per source address: `burst` reviews at once, then `rate` a second."""

    rate: float = 5.0
    burst: float = 20.0
    _buckets: dict[str, tuple[float, float]] = field(default_factory=dict, init=False)

    def take(self, source: str, now: float) -> float:
        """0 if `source` may have a review now (and it is counted), else the seconds
        until it may."""
        tokens, at = self._buckets.get(source, (self.burst, now))
        tokens = min(self.burst, tokens + (now - at) * self.rate)
        if tokens < 1.0:
            self._buckets[source] = (tokens, now)
            return (1.0 - tokens) / self.rate
        if len(self._buckets) > 10_000:  # many sources: forget the full buckets
            self._buckets = {s: b for s, b in self._buckets.items() if b[0] < self.burst}
        self._buckets[source] = (tokens - 1.0, now)
        return 0.0


MAX_PENDING_REVIEWS = 64  # more waiting than this: 503 at once, not a longer queue


@dataclass(eq=False)
class TokenReviewer:
    """TokenReview with a short cache of accepted tokens, so steady heartbeats cost the
    apiserver little, and a shorter one of refusals; implausible tokens never reach it.
    `wall_clock` judges the tokens' expiry, `clock` the caches and budgets."""

    api: k8s.AuthenticationV1Api
    owners: PodOwners
    audience: str = AUDIENCE
    ttl: float = 30.0
    timeout: float = 5.0
    refusal_ttl: float = REFUSAL_TTL_SECONDS
    budget: ReviewBudget = field(default_factory=ReviewBudget)
    max_pending: int = MAX_PENDING_REVIEWS
    clock: Callable[[], float] = time.monotonic
    wall_clock: Callable[[], float] = time.time
    _cache: dict[str, tuple[float, Caller | None]] = field(default_factory=dict, init=False)
    _pending: int = field(default=0, init=False)

    async def review(self, token: str, source: str = "") -> Caller | None:
        """The caller, None if the token is refused; raises ReviewUnavailable (or
        TooManyReviews, for `source`, the caller's address)."""
        now = self.clock()
        cached = self._cache.get(token)
        if cached is not None:
            at, caller = cached
            if now - at < (self.ttl if caller is not None else self.refusal_ttl):
                return caller
        if not plausible(token, self.audience, self.wall_clock()):
            return None
        wait = self.budget.take(source, now)
        if wait > 0:
            raise TooManyReviews(wait)
        if self._pending >= self.max_pending:
            raise ReviewUnavailable("too many tokens waiting for review")
        self._pending += 1
        try:
            caller = await executors.run_in(executors.AUTH, lambda: self._review(token))
        finally:
            self._pending -= 1
        if len(self._cache) > 10_000:
            self._cache.clear()
        self._cache[token] = (now, caller)
        return caller

    def forget_pod(self, pod_uid: str) -> None:
        """The pod is gone: its tokens are refused from now on, cached or not."""
        self._cache = {
            t: (at, c) for t, (at, c) in self._cache.items() if c is None or c.pod_uid != pod_uid
        }

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
        consumer = None
        if pod_name is not None and pod_uid is not None:
            consumer = self.owners.consumer_of(parts[2], pod_name, pod_uid)
        return Caller(parts[2], parts[3], pod_name, pod_uid, consumer)
