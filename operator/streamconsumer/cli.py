"""`streamconsumer status NAME [-n NAMESPACE] [--watch]`: a consumer's leases and
conditions, read from its status with your kubeconfig (install `streamconsumer[cli]`).
`streamconsumer pause|resume NAME`: set `spec.paused` (as Git could)."""

from __future__ import annotations

import argparse
import sys
import time
from typing import Any, cast

from kubernetes import client as k8s
from kubernetes import config as k8s_config
from kubernetes.client.exceptions import ApiException
from rich.console import Console, Group
from rich.live import Live
from rich.table import Table
from urllib3.exceptions import HTTPError

from streamconsumer.models import GROUP, PLURAL, VERSION


def fetch(api: k8s.CustomObjectsApi, namespace: str, name: str) -> dict[str, Any]:
    return cast(
        dict[str, Any], api.get_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, name)
    )


def render(body: dict[str, Any]) -> Group:
    status = body.get("status") or {}
    meta = body["metadata"]
    leases = Table(title=f"StreamConsumer {meta['namespace']}/{meta['name']}", title_justify="left")
    for column in ("SHARD", "OWNER", "EPOCH", "CHECKPOINT", "LAG (ms)", "STATE"):
        leases.add_column(
            column, no_wrap=True, justify="right" if column in ("EPOCH", "LAG (ms)") else "left"
        )
    for shard, lease in sorted((status.get("leases") or {}).items()):
        leases.add_row(
            shard,
            lease.get("owner") or "-",
            str(lease.get("epoch", 0)),
            lease.get("checkpoint") or "-",
            str(lease["millisBehindLatest"]) if "millisBehindLatest" in lease else "-",
            lease.get("state", "-")
            + (f" -> {lease['handoffTo']}" if lease.get("handoffTo") else ""),
        )
    conditions = Table(title="Conditions", title_justify="left")
    for column in ("TYPE", "STATUS", "REASON", "MESSAGE"):
        conditions.add_column(column)
    for condition in status.get("conditions") or []:
        conditions.add_row(
            condition["type"],
            condition["status"],
            condition["reason"],
            condition.get("message", ""),
        )
    paused = "  PAUSED" if (body.get("spec") or {}).get("paused") else ""
    summary = (
        f"shards {status.get('shards', 0)}  workers {status.get('replicas', 0)}{paused}  "
        f"lag {status.get('lagMillis', '-')} ms  generation {meta.get('generation')} "
        f"(observed {status.get('observedGeneration', '-')})"
    )
    return Group(leases, summary, conditions)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="streamconsumer", description=__doc__)
    commands = parser.add_subparsers(dest="command", required=True)
    status = commands.add_parser("status", help="leases and conditions of a StreamConsumer")
    status.add_argument("name")
    status.add_argument("-n", "--namespace", default=None, help="default: the kubeconfig's")
    status.add_argument("--watch", action="store_true", help="refresh every 2 seconds")
    status.add_argument("--kubeconfig", default=None)
    for verb, what in (("pause", "stop consuming"), ("resume", "consume again")):
        command = commands.add_parser(verb, help=f"{what}: sets spec.paused")
        command.add_argument("name")
        command.add_argument("-n", "--namespace", default=None, help="default: the kubeconfig's")
        command.add_argument("--kubeconfig", default=None)
    args = parser.parse_args(argv)
    console = Console()
    try:
        k8s_config.load_kube_config(config_file=args.kubeconfig)  # type: ignore[no-untyped-call]
        namespace = args.namespace or k8s_config.list_kube_config_contexts(args.kubeconfig)[1].get(  # type: ignore[no-untyped-call]
            "context", {}
        ).get("namespace", "default")
    except (k8s_config.ConfigException, OSError) as error:
        sys.exit(f"streamconsumer: no usable kubeconfig: {error}")
    api = k8s.CustomObjectsApi()
    try:
        if args.command in ("pause", "resume"):
            paused = args.command == "pause"
            api.patch_namespaced_custom_object(
                GROUP, VERSION, namespace, PLURAL, args.name, {"spec": {"paused": paused}}
            )
            state = "paused: workers hand their shards off" if paused else "resumed"
            console.print(f"{namespace}/{args.name} {state}")
            return
        body = fetch(api, namespace, args.name)
        if not args.watch:
            console.print(render(body))
            return
        with Live(render(body), console=console, refresh_per_second=1) as live:
            while True:
                time.sleep(2)
                live.update(render(fetch(api, namespace, args.name)))
    except ApiException as error:
        if error.status == 404:
            sys.exit(f"streamconsumer: {namespace}/{args.name} not found")
        sys.exit(f"streamconsumer: the API server said {error.status}: {error.reason}")
    except HTTPError as error:
        sys.exit(f"streamconsumer: cannot reach the API server: {error}")
    except KeyboardInterrupt:
        pass


if __name__ == "__main__":
    main()
