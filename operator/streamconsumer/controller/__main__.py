"""The operator process: serve the worker API, win the Lease, then run kopf.

    python -m streamconsumer.controller [--all-namespaces | --namespace NS ...] [-q|-v|-d]

A standby serves /healthz (so a RollingUpdate can go on) and answers workers 503; kopf
runs only on the leader, so two replicas never both reconcile or write status. The
leader stops kopf the moment its term runs out (exit 1: the pod restarts as a standby)
and, on SIGTERM, frees the Lease once its consumer loops have stopped writing (`step_down`,
called by the last loop to end, or after kopf returns)."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import functools
import logging
import signal
import sys
import time
import uuid
from collections.abc import Awaitable, Callable, Sequence

import kopf
from kubernetes import client as k8s
from prometheus_client import start_http_server
from pydantic import ValidationError

from streamconsumer.controller import executors, handlers, loop_lag, metrics
from streamconsumer.controller.certificates import ca_upkeep
from streamconsumer.controller.certificates.ca_upkeep import CaBundles
from streamconsumer.controller.certificates.serving import keep_fresh, publish_ca, serving_for
from streamconsumer.controller.config import OperatorConfig
from streamconsumer.controller.consumer.loop import PROBE_BURST
from streamconsumer.controller.consumer.registry import Registry
from streamconsumer.controller.context import OperatorContext, memo_for
from streamconsumer.controller.election.leadership import Elector, KubeLeaseLock, LeaderLabel
from streamconsumer.controller.election.lifecycle import Lifecycle, Phase
from streamconsumer.controller.worker_api.api import WorkerApi
from streamconsumer.controller.worker_api.auth import KubePodOwners, ReviewBudget, TokenReviewer
from streamconsumer.controller.worker_api.listeners import listen
from streamconsumer.controller.workloads.owned import apply_owned
from streamconsumer.core.election import Election
from streamconsumer.core.token_bucket import TokenBucket

log = logging.getLogger("streamconsumer.operator")


def parse(argv: Sequence[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m streamconsumer.controller")
    scope = parser.add_mutually_exclusive_group()
    scope.add_argument("-A", "--all-namespaces", action="store_true")
    scope.add_argument("-n", "--namespace", action="append", default=[])
    noise = parser.add_mutually_exclusive_group()
    noise.add_argument("-q", "--quiet", action="store_true")
    noise.add_argument("-v", "--verbose", action="store_true")
    noise.add_argument("-d", "--debug", action="store_true")
    return parser.parse_args(argv)


def _always() -> bool:
    return True


async def serve(args: argparse.Namespace, config: OperatorConfig) -> int:
    api_client = handlers.kube_client(executors.KUBERNETES_CALLERS)
    registry = Registry(time.monotonic, config.startup_grace_seconds)
    elector: Elector | None = None
    lifecycle = Lifecycle()
    leading: Callable[[], bool] = _always
    if config.leader_election:
        lock = KubeLeaseLock(
            # A client of its own: a renewal never shares a connection with the rest.
            handlers.kube_client(executors.ELECTION_THREADS),
            config.namespace,
            config.leader_lease_name,
            # A call may take up to a leader's whole term (ElectionDriver._call_timeout).
            timeout=config.leader_renew_deadline_seconds,
        )
        election = Election(config.identity(), config.election_timing(), time.monotonic())
        elector = Elector(lock, election, time.monotonic)
        # Both: the election's view now, and the process' (an ended term never resumes).
        leading = lambda: lifecycle.leading and elector.leading()  # noqa: E731
    metrics.LEADER.set_function(lambda: float(leading()))
    lag = asyncio.create_task(loop_lag.sample_lag(metrics.LOOP_LAG.observe))
    scrapes = None
    if config.metrics_port:  # every replica, standbys too: "no leader" is seen from them
        scrapes, _ = start_http_server(
            config.metrics_port, config.api_host, registry=metrics.REGISTRY
        )
    reviewer = TokenReviewer(
        k8s.AuthenticationV1Api(api_client),
        KubePodOwners.of(api_client),
        audience=config.token_audience,
        budget=ReviewBudget(config.token_reviews_per_second, config.token_review_burst),
    )
    api = WorkerApi(registry, reviewer, time.monotonic, leading, config.api_body_timeout_seconds)
    # HTTPS unless the API URL is http:// (local development): workers' tokens never
    # cross the pod network in clear. Every replica serves from the one CA in the Secret.
    tls = await executors.run_in(executors.KUBERNETES, lambda: serving_for(config, api_client))
    ssl_context = tls.context if tls is not None else None
    listeners = await listen(config, api.app(), ssl_context)
    refresh = None
    ca_bundles = CaBundles()
    if tls is not None:
        core = k8s.CoreV1Api(api_client)
        publish = functools.partial(publish_ca, core, config.namespace, config.tls_ca_bundle)
        spread = functools.partial(
            ca_upkeep.spread,
            registry=registry,
            bundles=ca_bundles,
            apply=functools.partial(apply_owned, api_client),
            leading=leading,
        )
        refresh = asyncio.create_task(keep_fresh(tls, publish, spread, config.tls_refresh_seconds))

    label = None
    if elector is not None and config.pod_name:
        label = LeaderLabel(api_client, config.namespace, config.pod_name)
    terminating = asyncio.Event()
    for signum in (signal.SIGTERM, signal.SIGINT):
        asyncio.get_running_loop().add_signal_handler(signum, terminating.set)
    if elector is not None:
        elector.start()
    watch: asyncio.Task[None] | None = None
    stepped_down = False
    stop = asyncio.Event()

    def deposed(reason: str) -> None:
        """A newer term fenced a consumer's status: ours is over, whatever the Lease says."""
        lifecycle.deposed(reason)
        stop.set()

    async def step_down() -> None:
        """Takes the leader label off and frees the Lease, once."""
        nonlocal stepped_down
        if elector is None or stepped_down:
            return
        stepped_down = True
        lifecycle.observe(elector.leading(), elector.lost())
        if label is not None:
            with contextlib.suppress(Exception):  # the next leader takes it off anyway
                await executors.run_in(executors.KUBERNETES, label.drop)
        await elector.resign()

    try:
        if elector is not None:
            log.info(
                "%s: standby, waiting for lease %s", elector.identity, config.leader_lease_name
            )
            await _first(elector.until_leading(), terminating.wait())
            if terminating.is_set():
                return 0
            if lifecycle.observe(elector.leading(), elector.lost()) is Phase.ENDED:
                log.error("%s: the term ended before it began; exiting", elector.identity)
                return 1
            if label is not None:
                await executors.run_in(executors.KUBERNETES, label.claim)
        lifecycle.observe(leading=True, lost=False)
        registry.leading()
        if elector is not None:
            watch = asyncio.create_task(_stop_when(_term_over(elector, lifecycle), stop))
        context = OperatorContext(
            config=config,
            api_client=api_client,
            registry=registry,
            reviewer=reviewer,
            tls=tls,
            ca_bundles=ca_bundles,
            # Unique to this process: a restart in the same pod is a new term holder.
            holder=f"{config.identity()}/{uuid.uuid4().hex[:8]}",
            leading=leading,
            deposed=deposed,
            stop_serving=listeners.stop,
            step_down=step_down,
            probes=TokenBucket(config.backlog_probes_per_second, PROBE_BURST),
        )
        await kopf.operator(
            clusterwide=args.all_namespaces,
            namespaces=args.namespace,
            standalone=True,
            stop_flag=stop,
            memo=memo_for(context),
        )
    finally:
        log.info("%s: kopf stopped", config.identity())
        for task in (watch, refresh, lag):
            if task is not None:
                task.cancel()
        if elector is not None:
            await step_down()
            await elector.stop()
        await listeners.stop()
        if scrapes is not None:
            scrapes.shutdown()
    if lifecycle.exit_code:
        log.error(
            "%s: no longer leads (%s); stopped, exiting to come back as a standby",
            config.identity(),
            lifecycle.reason,
        )
    return lifecycle.exit_code


async def _term_over(elector: Elector, lifecycle: Lifecycle) -> None:
    """Returns once the lifecycle, judging each change the election reports, has ended
    (the simulation's replicas judge it the same way)."""
    while lifecycle.observe(elector.leading(), elector.lost()) is not Phase.ENDED:
        await elector.next_change()


async def _first(*waits: Awaitable[object]) -> None:
    tasks = [asyncio.ensure_future(w) for w in waits]
    try:
        await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for task in tasks:
            task.cancel()


async def _stop_when(condition: Awaitable[object], stop: asyncio.Event) -> None:
    await condition
    stop.set()


class QuietTimers(logging.Filter):
    """Drops kopf's line for each timer run that succeeded: two timers a consumer make it
    most of the log at scale (9,000 of 10,000 lines in 3 minutes at 200 consumers) and
    say nothing a failure would not. --verbose keeps them."""

    def filter(self, record: logging.LogRecord) -> bool:
        if record.levelno > logging.INFO:
            return True
        message = record.getMessage()
        return not (message.startswith("Timer '") and message.endswith("' succeeded."))


def run(argv: Sequence[str] | None = None) -> int:
    args = parse(sys.argv[1:] if argv is None else argv)
    kopf.configure(debug=args.debug, verbose=args.verbose, quiet=args.quiet)
    if not (args.verbose or args.debug):
        logging.getLogger("kopf.objects").addFilter(QuietTimers())
    try:
        config = OperatorConfig()
    except ValidationError as error:
        print(f"streamconsumer operator: bad settings:\n{error}", file=sys.stderr)
        return 2
    if not args.all_namespaces and not args.namespace:
        args.all_namespaces = True
    return asyncio.run(serve(args, config))


if __name__ == "__main__":
    sys.exit(run())
