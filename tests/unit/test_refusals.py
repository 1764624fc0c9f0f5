"""Issue 24: refused worker API calls (401, 403) are logged, rate-limited, and counted:
one line per source and reason a minute with the count of those held back, each naming
why and who, never the token or the body."""

from __future__ import annotations

import asyncio
import logging

import pytest
from aiohttp.test_utils import TestClient, TestServer

from streamconsumer.controller import metrics
from streamconsumer.controller.consumer.registry import Registry
from streamconsumer.controller.leases.lease_coordinator import LeaseCoordinator
from streamconsumer.controller.leases.state import DurableState
from streamconsumer.controller.worker_api import answers
from streamconsumer.controller.worker_api.answers import Refusal, admit
from streamconsumer.controller.worker_api.api import WorkerApi
from streamconsumer.controller.worker_api.caller import Caller
from streamconsumer.controller.worker_api.refusals import MAX_VALUE_CHARS, line
from streamconsumer.models.api import WIRE_VERSION, WIRE_VERSION_HEADER
from testbed.specs import consumer_spec

from .fenced import fenced_consumer
from .moments import CREATED

LOGGER = "streamconsumer.controller.worker_api.refusals"
HEARTBEAT = "/v1/namespaces/n/streamconsumers/c/heartbeat"
WORKER = Caller(
    "n", "c-worker", pod_name="w", pod_uid="u", consumer="c", consumer_account="c-worker"
)


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


class Reviewer:
    """Accepts every token as `caller` (None: refuses every one)."""

    def __init__(self, caller: Caller | None) -> None:
        self.caller = caller

    async def review(self, token: str, source: str = "") -> Caller | None:
        return self.caller


def refused_total(status: str) -> float:
    sample = "streamconsumer_worker_api_refusals_total"
    return metrics.REGISTRY.get_sample_value(sample, {"status": status}) or 0.0


def lines(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == LOGGER]


def post(api: WorkerApi, calls: list[tuple[str, dict[str, str], bytes]]) -> list[int]:
    """Each call (path, headers, body) in turn, on one server; their statuses."""

    async def run() -> list[int]:
        async with TestClient(TestServer(api.app())) as client:
            statuses = []
            for path, headers, body in calls:
                response = await client.post(path, data=body, headers=headers)
                statuses.append(response.status)
            return statuses

    return asyncio.run(run())


def managed_api(caller: Caller | None, clock: Clock) -> WorkerApi:
    registry = Registry(clock, startup_grace=0.0)
    registry.leading()
    coordinator = LeaseCoordinator(consumer_spec(), DurableState(), clock(), created=CREATED)
    registry.add(fenced_consumer("n", "c", coordinator))
    return WorkerApi(registry, Reviewer(caller), clock)


def test_a_thousand_refusals_from_one_source_give_one_line_and_the_next_counts_them(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.WARNING, LOGGER)
    clock = Clock()
    api = managed_api(None, clock)
    before = refused_total("401")
    no_token = (HEARTBEAT, {WIRE_VERSION_HEADER: str(WIRE_VERSION)}, b"{}")
    assert set(post(api, [no_token] * 1000)) == {401}
    assert refused_total("401") - before == 1000, "every one counted"
    [first] = lines(caplog)
    assert first == (
        "worker API: call refused status=401 reason=no_token source=127.0.0.1 consumer=n/c"
    )
    clock.now += 61
    assert post(api, [no_token]) == [401]
    assert lines(caplog)[1:] == [f"{first} suppressed=999"]


def test_a_line_names_why_and_who_but_never_the_token_or_the_body(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.WARNING, LOGGER)
    clock = Clock()
    headers = {WIRE_VERSION_HEADER: str(WIRE_VERSION), "Authorization": "Bearer s3cret.tok.en"}
    other = b'{"worker": "w2\\nFAKE LOG LINE", "held": [], "draining": true}'
    assert post(managed_api(WORKER, clock), [(HEARTBEAT, headers, other)]) == [403]
    assert post(managed_api(None, clock), [(HEARTBEAT, headers, b"{}")]) == [401]
    speaks_for_another, not_accepted = lines(caplog)
    assert speaks_for_another == (
        "worker API: call refused status=403 reason=other_worker source=127.0.0.1 "
        'consumer=n/c account=n/c-worker pod=w worker="w2\\nFAKE LOG LINE"'
    ), "the claimed worker, quoted: the caller cannot start a line of its own"
    assert not_accepted.endswith("status=401 reason=token_refused source=127.0.0.1 consumer=n/c")
    for text in (speaks_for_another, not_accepted):
        assert "s3cret" not in text
        assert "tok.en" not in text
        assert "draining" not in text


def test_a_path_the_caller_chose_is_quoted_and_cut() -> None:
    long = "x" * 1000
    text = line(401, Refusal("no_token"), "10.0.0.1", f"n\r\nFAKE/{long}", 0)
    assert "\n" not in text
    assert "\r" not in text
    assert 'consumer="n\\r\\nFAKE/xxx' in text
    assert text.endswith('..."')
    assert len(text) < MAX_VALUE_CHARS + 120


def test_every_401_and_403_says_why() -> None:
    assert isinstance(refused := answers.front_door(True, str(WIRE_VERSION), None), answers.Reply)
    assert refused.refusal == Refusal(answers.NO_TOKEN)
    registry = Registry(Clock(), startup_grace=0.0)
    cases = {
        None: Refusal(answers.TOKEN_REFUSED),
        Caller("m", "c-worker", "w", "u", "c", "c-worker"): Refusal(
            answers.OTHER_ACCOUNT, "m/c-worker", "w"
        ),
        Caller("n", "x-worker", "w", "u", "c", "c-worker"): Refusal(
            answers.OTHER_ACCOUNT, "n/x-worker", "w"
        ),
        Caller("n", "c-worker", "p", "u", None): Refusal(answers.NOT_A_WORKER, "n/c-worker", "p"),
    }
    for caller, why in cases.items():
        reply = admit(caller, "n", "c", registry)
        assert isinstance(reply, answers.Reply)
        assert (reply.status, reply.refusal) == (401 if caller is None else 403, why)
