"""kopf handlers, and only them: each is a few lines that hand over to typed code. What
they share is the `OperatorContext` the entry point (`__main__.py`) builds once and puts
in kopf's memo; kopf runs only on the elected leader:

python -m streamconsumer.controller --all-namespaces
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Awaitable, Callable, Iterator
from typing import Any, TypeVar

import kopf
from kubernetes import client as k8s
from kubernetes import config as k8s_config
from pydantic import ValidationError

from streamconsumer import audit
from streamconsumer.controller import names, requests
from streamconsumer.controller.aws import fanout
from streamconsumer.controller.aws.access import AccessPolicy, AccessRefused
from streamconsumer.controller.consumer import consumers, stalls
from streamconsumer.controller.context import context_of
from streamconsumer.controller.essence import Essence
from streamconsumer.controller.workloads import reconcile, worker_health
from streamconsumer.models import GROUP, PLURAL, VERSION
from streamconsumer.models.resource import (
    NAME_LABEL,
    REQUESTED_BY,
    RESET_ANNOTATION,
    Source,
)

# A consumer whose spec.startFrom cannot be resumed from yet (the ConfigMap not there)
# looks again this often.
RESUME_RETRY_SECONDS = 30.0
CATCH_UP_SECONDS = 5.0  # a spec change kopf took as handled is applied within this

_T = TypeVar("_T")


def kube_client(connections: int) -> k8s.ApiClient:
    """A client of the pod's (or the kubeconfig's) credentials keeping up to
    `connections` connections to the apiserver: one for each thread that calls it."""
    try:
        k8s_config.load_incluster_config()  # type: ignore[no-untyped-call]
    except k8s_config.ConfigException:
        k8s_config.load_kube_config()  # type: ignore[no-untyped-call]
    configuration = k8s.Configuration.get_default_copy()
    configuration.connection_pool_maxsize = connections
    return k8s.ApiClient(configuration)


@kopf.on.startup()
async def startup(settings: kopf.OperatorSettings, **_: Any) -> None:
    # Keep kopf's bookkeeping in annotations: status belongs to the lease table.
    settings.persistence.progress_storage = kopf.AnnotationsProgressStorage(prefix=GROUP)
    settings.persistence.diffbase_storage = Essence(prefix=GROUP)  # bounded: essence.py
    settings.posting.level = logging.INFO


@kopf.on.cleanup()
async def stop_serving(memo: kopf.Memo, **_: Any) -> None:
    """A stopping operator serves workers no more: they retry, and reach the next leader."""
    await context_of(memo).stop_serving()


@kopf.on.resume(GROUP, VERSION, PLURAL)
@kopf.on.create(GROUP, VERSION, PLURAL)
@kopf.on.update(GROUP, VERSION, PLURAL, field="spec")
async def reconcile_children(
    body: kopf.Body,
    name: str,
    namespace: str | None,
    memo: kopf.Memo,
    logger: kopf.Logger,
    **_: Any,
) -> None:
    assert namespace is not None, "StreamConsumer is namespaced"
    await reconcile.apply_children(context_of(memo), body, name, namespace, logger)


# kopf runs one handler per event and then stores the newest state as handled: a spec
# change that lands while the handlers after reconcile_children run is taken as handled
# though reconcile_children never saw it (a pause never reaching the loop, an image never
# deployed). Every few seconds, a consumer whose objects and loop are behind its
# generation is reconciled again. (kopf's all_at_once lifecycle avoided it, but held a
# deleted fan-out consumer's finalizer for good once its daemon had waited to hand off.)
@kopf.timer(GROUP, VERSION, PLURAL, interval=CATCH_UP_SECONDS, initial_delay=CATCH_UP_SECONDS)
async def catch_up(body: kopf.Body, memo: kopf.Memo, **kwargs: Any) -> None:
    generation = reconcile.generation(body)
    if context_of(memo).registry.behind(kwargs["namespace"], kwargs["name"], generation):
        # (kopf's decorators type a handler's result as object; this one is a coroutine)
        await reconcile_children(body=body, memo=memo, **kwargs)  # type: ignore[misc]


@kopf.on.event("", "v1", "pods", labels={NAME_LABEL: names.WORKER_APP})
async def worker_pod_changed(event: kopf.RawEvent, memo: kopf.Memo, **_: Any) -> None:
    """A deleted worker pod's tokens are refused at once, not when their cache runs out.
    A pod that does not start (image pull, crash loop, ...) shows in its consumer's
    status (worker_health.py)."""
    reconcile.worker_pod_changed(context_of(memo), event["type"], event["object"])


# The Deployment's own word on its pods (a ReplicaSet refused by a quota or an admission
# policy makes no pod for the watch above to see): one GET per consumer every
# DEPLOYMENT_CHECK_SECONDS, every ROLLOUT_CHECK_SECONDS while a new spec rolls out, so
# that observedGeneration (what Argo CD and Flux wait on) moves once its workers run it.
@kopf.timer(
    GROUP,
    VERSION,
    PLURAL,
    interval=worker_health.ROLLOUT_CHECK_SECONDS,
    initial_delay=2.0,
)
async def check_workers(
    body: kopf.Body, name: str, namespace: str | None, memo: kopf.Memo, **_: Any
) -> None:
    assert namespace is not None, "StreamConsumer is namespaced"
    await reconcile.check_workers(context_of(memo), body, name, namespace)


@contextlib.contextmanager
def _fan_out_failures() -> Iterator[None]:
    """kopf shows a handler's error in an Event: only our bounded words reach it."""
    try:
        yield
    except AccessRefused as refused:
        raise kopf.PermanentError(f"access policy: {refused}") from None
    except fanout.FanOutFailed as failed:
        raise kopf.TemporaryError(str(failed), delay=5.0) from None


def _fan_out(body: kopf.Body, **_: Any) -> bool:
    return fanout.uses_fan_out(reconcile.spec_of(body).source)


# Enhanced fan-out: a stream consumer while the resource exists and says fanOut. Every
# StreamConsumer carries kopf's finalizer anyway (for the `consume` daemon); the delete
# handler runs only for fanOut ones, and a switch to polling deregisters at once.
@kopf.on.resume(GROUP, VERSION, PLURAL, when=_fan_out, backoff=5.0)
@kopf.on.create(GROUP, VERSION, PLURAL, when=_fan_out, backoff=5.0)
async def register_stream_consumer(body: kopf.Body, logger: kopf.Logger, **handler: Any) -> None:
    arn = await _fan_out_call(fanout.register, body, **handler)
    logger.info("enhanced fan-out through stream consumer %s", arn)


@kopf.on.update(GROUP, VERSION, PLURAL, field="spec.source", backoff=5.0)
async def stream_consumer_changed(
    old: Any, new: Any, name: str, namespace: str | None, memo: kopf.Memo, **_: Any
) -> None:
    assert namespace is not None, "StreamConsumer is namespaced"
    policy = context_of(memo).config.aws_access
    with _fan_out_failures():
        await fanout.consumer_changed(policy, namespace, name, old or {}, new or {})


@kopf.on.delete(GROUP, VERSION, PLURAL, when=_fan_out, backoff=5.0)
async def deregister_stream_consumer(body: kopf.Body, logger: kopf.Logger, **handler: Any) -> None:
    await _fan_out_call(fanout.deregister, body, **handler)
    logger.info("stream consumer deregistered")


async def _fan_out_call(
    action: Callable[[AccessPolicy, str, str, Source], Awaitable[_T]],
    body: kopf.Body,
    *,
    name: str,
    namespace: str | None,
    memo: kopf.Memo,
    **_: Any,
) -> _T:
    assert namespace is not None, "StreamConsumer is namespaced"
    policy = context_of(memo).config.aws_access
    with _fan_out_failures():
        return await action(policy, namespace, name, reconcile.spec_of(body).source)


@kopf.on.field(GROUP, VERSION, PLURAL, field=("metadata", "annotations", RESET_ANNOTATION))
async def reset_requested(
    body: kopf.Body, name: str, namespace: str | None, memo: kopf.Memo, **_: Any
) -> None:
    assert namespace is not None, "StreamConsumer is namespaced"
    context = context_of(memo)
    try:
        request = audit.reset_request(body)
    except ValidationError as error:
        kopf.warn(body, reason="ResetInvalid", message=f"{RESET_ANNOTATION}: {error}")
        return
    if request is None:
        return
    consumer = context.registry.get(namespace, name)
    if consumer is not None:
        consumer.coordinator.request_reset(request)
        consumer.wake()
    reason, message = requests.reset_event(request.id, request.to, request.requested_by or "")
    kopf.info(body, reason=reason, message=message)


@kopf.on.field(GROUP, VERSION, PLURAL, field="spec.paused")
async def pause_changed(
    body: kopf.Body,
    old: Any,
    new: Any,
    name: str,
    namespace: str | None,
    memo: kopf.Memo,
    **_: Any,
) -> None:
    assert namespace is not None, "StreamConsumer is namespaced"
    if not old and not new:
        return  # created running: nothing was paused or resumed
    context = context_of(memo)
    by = audit.asked_by(body, audit.PAUSED_FIELD)
    context.registry.pause_asked(namespace, name, by if new else None)
    reason, message = requests.pause_event(bool(new), by)
    kopf.info(body, reason=reason, message=message)


# After the two above: in the cycle that sees a request, they read the name from this same
# body first. Whatever came with it, the name goes: a pause of a consumer already paused,
# an object created with it, or an invalid reset change nothing the handlers above record,
# and a name left standing would sit beside the next change (and, under the admission
# policy, refuse everyone else's). A failed removal is tried again (backoff), not dropped.
@kopf.on.field(GROUP, VERSION, PLURAL, field=("metadata", "annotations", REQUESTED_BY), backoff=5.0)
async def requester_named(body: kopf.Body, new: Any, memo: kopf.Memo, **_: Any) -> None:
    if new is not None:
        await requests.forget_requester(context_of(memo).api_client, body)


def _deleted(stopped: kopf.DaemonStopped) -> bool:
    reason = stopped.reason
    return reason is not None and bool(reason & kopf.DaemonStoppingReason.RESOURCE_DELETED)


# A loop that fails restarts after 2 s (kopf defaults to 60 s), from the persisted status;
# it is built not to fail (errors are retried in place and shown as conditions). A loop
# that returns by itself is not restarted by kopf: it returns only when this replica's
# term is over, and then the process ends (docs/design.md#operator-lifecycle).
# Stopped, the loop returns within a tick; a deleted consumer's runs on while its workers
# hand off (consumers.FAREWELL_SECONDS) and its checkpoints are kept (all of it within
# consumers.KEEPING_SECONDS). kopf cancels it only after the backoff (by default at once).
@kopf.daemon(
    GROUP,
    VERSION,
    PLURAL,
    cancellation_backoff=consumers.KEEPING_SECONDS + 10.0,
    cancellation_timeout=5.0,
    backoff=2.0,
)
async def consume(
    body: kopf.Body,
    name: str,
    namespace: str | None,
    stopped: kopf.DaemonStopped,
    memo: kopf.Memo,
    **_: Any,
) -> None:
    assert namespace is not None, "StreamConsumer is namespaced"
    context = context_of(memo)
    try:
        await consumers.consume(
            context, body, namespace, name, lambda: bool(stopped), lambda: _deleted(stopped)
        )
    except consumers.ResumeRefused as refused:
        kopf.warn(body, reason="CheckpointsNotResumed", message=str(refused))
        raise kopf.TemporaryError(str(refused), delay=RESUME_RETRY_SECONDS) from None
    except consumers.Refused as refused:  # this consumer alone: the others go on
        await stalls.stall(context.api_client, body, refused.reason, str(refused))
        raise kopf.TemporaryError(str(refused), delay=stalls.RETRY_SECONDS) from None
    finally:
        # A stopping leader frees the Lease once no consumer loop can write any more,
        # not after kopf has wound down (it waits 5 s for tasks it did not start).
        exiting = stopped.reason is not None and bool(
            stopped.reason & kopf.DaemonStoppingReason.OPERATOR_EXITING
        )
        if exiting and context.registry.idle():
            await context.step_down()
