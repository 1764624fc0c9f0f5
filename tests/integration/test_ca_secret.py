"""The operator's CA Secret on the real apiserver: two replicas racing to create it end
up with one CA (the loser's create gets 409 and reads the winner's)."""

from __future__ import annotations

import datetime as dt
import threading
from concurrent.futures import ThreadPoolExecutor

from kubernetes import client as k8s

from streamconsumer.controller.certificates import ca_secret, tls


def test_two_replicas_racing_to_create_the_ca_share_one(
    api_client: k8s.ApiClient, namespace: str
) -> None:
    core = k8s.CoreV1Api(api_client)
    both_missed = threading.Barrier(2, timeout=10)  # both read 404 before either creates

    def make() -> tls.KeyPair:
        both_missed.wait()
        return tls.make_ca(dt.datetime.now(dt.UTC))

    with ThreadPoolExecutor(2) as pool:
        first, second = pool.map(
            lambda _: ca_secret.load_or_create(core, namespace, "operator-ca", make), range(2)
        )
    assert first == second, "both replicas serve from the same CA"
    assert both_missed.broken is False
    # A later start reads it and makes nothing.
    assert ca_secret.load_or_create(core, namespace, "operator-ca", never) == first


def never() -> tls.KeyPair:
    raise AssertionError("the CA exists: nothing to make")
