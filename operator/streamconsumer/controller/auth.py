"""Who is calling the worker API: a projected ServiceAccount token, validated by the
apiserver's TokenReview. Pod-bound tokens carry the pod's name, so a worker can only
speak for itself."""

from __future__ import annotations

import time
from dataclasses import dataclass

from kubernetes import client as k8s
from kubernetes.client.exceptions import ApiException
from urllib3.exceptions import HTTPError

from streamconsumer.controller import executors

AUDIENCE = "streamconsumer.io"
_POD_NAME = "authentication.kubernetes.io/pod-name"


@dataclass(frozen=True)
class Caller:
    namespace: str
    service_account: str
    pod_name: str | None


class ReviewUnavailable(Exception):
    """The apiserver could not review the token now; the caller should retry."""


class TokenReviewer:
    """TokenReview with a short cache of accepted tokens, so steady heartbeats cost the
    apiserver little. A refusal is never cached: the next call asks again (a token may
    be refused while its pod is still being created)."""

    def __init__(
        self,
        api: k8s.AuthenticationV1Api,
        audience: str = AUDIENCE,
        ttl: float = 30.0,
        timeout: float = 5.0,
    ) -> None:
        self._api = api
        self._audience = audience
        self._ttl = ttl
        self._timeout = timeout
        self._cache: dict[str, tuple[float, Caller]] = {}

    async def review(self, token: str) -> Caller | None:
        """The caller, None if the token is refused; raises ReviewUnavailable."""
        now = time.monotonic()
        cached = self._cache.get(token)
        if cached and now - cached[0] < self._ttl:
            return cached[1]
        caller = await executors.run_in(executors.AUTH, lambda: self._review(token))
        if caller is not None:
            if len(self._cache) > 10_000:
                self._cache.clear()
            self._cache[token] = (now, caller)
        return caller

    def _review(self, token: str) -> Caller | None:
        body = k8s.V1TokenReview(
            spec=k8s.V1TokenReviewSpec(token=token, audiences=[self._audience])
        )
        try:
            status = self._api.create_token_review(body, _request_timeout=self._timeout).status
        except (ApiException, HTTPError, OSError) as error:
            raise ReviewUnavailable(f"TokenReview failed: {error}") from None
        if status is None or not status.authenticated or status.user is None:
            return None
        # An authenticator that ignores audiences would accept any token of the cluster:
        # the review must say the token is meant for us.
        if self._audience not in (status.audiences or []):
            return None
        parts = (status.user.username or "").split(":")
        if len(parts) != 4 or parts[:2] != ["system", "serviceaccount"]:
            return None
        pod_names = (status.user.extra or {}).get(_POD_NAME) or []
        pod_name = pod_names[0] if pod_names else None
        return Caller(namespace=parts[2], service_account=parts[3], pod_name=pod_name)
