"""Who is calling the worker API: a projected ServiceAccount token, validated by the
apiserver's TokenReview. Pod-bound tokens carry the pod's name, so a worker can only
speak for itself.

TokenReviews cost the apiserver and run on their own small pool (`executors.AUTH`), so
junk must not reach them (docs/security.md#worker-identity): a token that cannot be a
projected ServiceAccount token meant for us (`plausible`: shape, audience, expiry,
subject; no signature check, TokenReview does that) is refused at once, and
a refusal is remembered for a few seconds, so a caller repeating one token costs one
review per interval."""

from __future__ import annotations

import base64
import binascii
import json
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from kubernetes import client as k8s
from kubernetes.client.exceptions import ApiException
from urllib3.exceptions import HTTPError

from streamconsumer.controller import executors

AUDIENCE = "streamconsumer.io"
_POD_NAME = "authentication.kubernetes.io/pod-name"
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


class ReviewUnavailable(Exception):
    """The apiserver could not review the token now; the caller should retry."""


@dataclass(eq=False)
class TokenReviewer:
    """TokenReview with a short cache of accepted tokens, so steady heartbeats cost the
    apiserver little, and a shorter one of refusals; implausible tokens never reach it.
    `wall_clock` judges the tokens' expiry, `clock` the caches."""

    api: k8s.AuthenticationV1Api
    audience: str = AUDIENCE
    ttl: float = 30.0
    timeout: float = 5.0
    refusal_ttl: float = REFUSAL_TTL_SECONDS
    clock: Callable[[], float] = time.monotonic
    wall_clock: Callable[[], float] = time.time
    _cache: dict[str, tuple[float, Caller | None]] = field(default_factory=dict, init=False)

    async def review(self, token: str) -> Caller | None:
        """The caller, None if the token is refused; raises ReviewUnavailable."""
        now = self.clock()
        cached = self._cache.get(token)
        if cached is not None:
            at, caller = cached
            if now - at < (self.ttl if caller is not None else self.refusal_ttl):
                return caller
        if not plausible(token, self.audience, self.wall_clock()):
            return None
        caller = await executors.run_in(executors.AUTH, lambda: self._review(token))
        if len(self._cache) > 10_000:
            self._cache.clear()
        self._cache[token] = (now, caller)
        return caller

    def _review(self, token: str) -> Caller | None:
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
        pod_names = (status.user.extra or {}).get(_POD_NAME) or []
        pod_name = pod_names[0] if pod_names else None
        return Caller(namespace=parts[2], service_account=parts[3], pod_name=pod_name)
