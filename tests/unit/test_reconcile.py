"""Applying a consumer's workers' objects (controller/workloads/reconcile.py::apply_children) from a
replica whose term ends on the way."""

from __future__ import annotations

import asyncio
import logging
from types import SimpleNamespace
from typing import Any, cast

import kopf
import pytest

from streamconsumer.controller.config import OperatorConfig
from streamconsumer.controller.consumer.registry import Registry
from streamconsumer.controller.context import OperatorContext
from streamconsumer.controller.workloads import reconcile
from testbed.specs import consumer_spec

BODY = kopf.Body(
    cast(
        kopf.RawBody,
        {
            "apiVersion": "streamconsumer.io/v1alpha1",
            "kind": "StreamConsumer",
            "metadata": {"name": "c", "namespace": "n", "uid": "u-1", "generation": 2},
            "spec": consumer_spec().model_dump(mode="json", by_alias=True, exclude_none=True),
        },
    )
)


def test_a_term_that_ends_between_two_applies_applies_nothing_more(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Found by review: each object was applied after the previous one's await with no
    look at the term, so a replica frozen in one apply and resumed after a takeover went
    on to apply the rest from the spec it had read, over the new leader's, maybe newer."""
    applied: list[str] = []
    leads = [True]

    def apply_owned(api_client: Any, manifest: dict[str, Any], *_: Any) -> None:
        applied.append(manifest["kind"])
        leads[0] = False  # the Lease ran out while this call was out

    monkeypatch.setattr(reconcile, "apply_owned", apply_owned)
    context = cast(
        OperatorContext,
        SimpleNamespace(
            config=OperatorConfig(),
            api_client=None,
            registry=Registry(lambda: 0.0),
            tls=None,
            leading=lambda: leads[0],
        ),
    )
    logger = cast(kopf.Logger, logging.getLogger(__name__))
    asyncio.run(reconcile.apply_children(context, BODY, "c", "n", logger))
    assert applied == ["ServiceAccount"], "nothing applied after the term ended"
    assert context.registry.behind("n", "c", 2), "not recorded as applied: the leader applies"
