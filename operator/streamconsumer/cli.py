"""`streamconsumer status NAME [-n NAMESPACE] [--context CONTEXT] [--watch]`: a consumer's
leases and conditions, read from its status with your kubeconfig (install
`streamconsumer[cli]`).
`streamconsumer pause|resume NAME`: set `spec.paused` (as Git could).
`streamconsumer reset NAME --to trim-horizon|latest|timestamp T [--shard ID] [--dry-run]`:
move checkpoints, safely while workers run (owners hand off first).
`streamconsumer checkpoints export NAME` / `import FILE [--name NAME]`: a lease table as
JSON, out of a consumer and into the one a new consumer resumes from (docs/checkpoints.md);
`import --from-kcl-table TABLE --for MANIFEST`: a KCL application's, for the switch.
`streamconsumer deadletters list|show|redrive --for MANIFEST`: a consumer's dead letters,
read back from their target, and delivered again once the bug is fixed."""

from __future__ import annotations

import argparse
import json
import re
import sys
import time
import uuid
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, TextIO

from kubernetes import client as k8s
from kubernetes import config as k8s_config
from kubernetes.client.exceptions import ApiException
from rich.console import Console, Group
from rich.live import Live
from rich.table import Table
from urllib3.exceptions import HTTPError

from streamconsumer import __version__, cli_checkpoints, cli_deadletters, cli_kcl
from streamconsumer.controller import apply
from streamconsumer.controller.leases.lease_group_store import read_consumer
from streamconsumer.controller.leases.status import STATUS_ERRORS
from streamconsumer.models import GROUP, PLURAL, VERSION
from streamconsumer.models.kept import UNPACKED_MAX_BYTES
from streamconsumer.models.resource import (
    DNS_LABEL,
    DNS_SUBDOMAIN,
    REQUESTED_BY,
    RESET_ANNOTATION,
    ResetPosition,
    ResetRequest,
)
from streamconsumer.resets import ResetError, describe, parse_position, shards_to_reset

# How long `pause` and `resume` wait for an operator to take the change up (its status
# observes the new generation within its status interval, 1 s, when one runs).
TAKEN_UP_SECONDS = 5.0

# One field manager per audited field (docs/security.md#audit): the operator takes a
# name only from the managedFields entry that last wrote the field, and an entry of the
# apiserver's is a manager's, shared by every user and every write of it. Were a pause and
# a reset written by one manager, bob's reset would leave the entry that wrote alice's
# `spec.paused` owning bob's name.


def whoami(api_client: k8s.ApiClient) -> str | None:
    """Your user name as the apiserver knows you (a SelfSubjectReview), to go with what
    you ask for (docs/security.md#audit); None where the apiserver cannot say."""
    try:
        authentication = k8s.AuthenticationV1Api(api_client)
        review = authentication.create_self_subject_review(k8s.V1SelfSubjectReview())
    except (ApiException, HTTPError):
        return None
    user = review.status.user_info if review.status is not None else None
    return user.username if user is not None else None


def ask(
    api: k8s.CustomObjectsApi, namespace: str, name: str, patch: dict[str, Any]
) -> dict[str, Any]:
    """Patches the object with what is asked and who asks for it (the same client). Where
    the apiserver cannot say who you are, the patch removes any name left standing (a
    merge patch's null), so that no one else's is taken for yours."""
    annotations = patch.setdefault("metadata", {}).setdefault("annotations", {})
    annotations[REQUESTED_BY] = whoami(api.api_client)
    manager = apply.CLI_RESET if RESET_ANNOTATION in annotations else apply.CLI
    patched = api.patch_namespaced_custom_object(
        GROUP, VERSION, namespace, PLURAL, name, patch, field_manager=manager
    )
    return patched if isinstance(patched, dict) else {}


def taken_up(
    read: Callable[[], dict[str, Any]],
    generation: int,
    within: float,
    sleep: Callable[[float], None] = time.sleep,
    clock: Callable[[], float] = time.monotonic,
) -> bool:
    """Whether an operator took up the change that made `generation`: its status observes
    it within `within` seconds. The command line cannot see the operator itself (its
    namespace and Lease are the release's), only what the operator writes."""
    deadline = clock() + within
    while True:
        observed = (read().get("status") or {}).get("observedGeneration")
        if isinstance(observed, int) and observed >= generation:
            return True
        if clock() >= deadline:
            return False
        sleep(0.5)


def pause_outcome(consumer: str, paused: bool, operator_took_it: bool) -> str:
    """What a pause or resume did: a hand-off is promised only when an operator runs."""
    if operator_took_it:
        return f"{consumer} " + ("paused: workers hand their shards off" if paused else "resumed")
    verb, done = ("stop", "paused") if paused else ("resume", "resumed")
    return (
        f"{consumer} {done} in its spec, but no operator has taken it up within "
        f"{TAKEN_UP_SECONDS:.0f}s (is one running?): the workers {verb} at the next sync "
        "when an operator runs"
    )


def api_error(error: ApiException, namespace: str, name: str) -> str:
    """The apiserver's refusal in its own words (a Status' `message`): a 403 names the
    verb, resource and user, where the HTTP reason says only "Forbidden"."""
    try:
        body = json.loads(error.body or "")
    except (TypeError, ValueError):
        body = None
    status = body if isinstance(body, dict) else {}
    details = status.get("details") or {}
    if error.status == 404 and details.get("name") == name:
        return f"streamconsumer: {namespace}/{name} not found"
    said = f"streamconsumer: the API server refused ({error.status} {error.reason})"
    message = status.get("message")
    return f"{said}: {message}" if isinstance(message, str) and message else said


def connect(kubeconfig: str | None, context: str | None, namespace: str | None) -> str:
    """Loads the kubeconfig's `context` (its current one if None) for the API clients;
    the namespace to use: `namespace`, or the context's, or "default"."""
    try:
        k8s_config.load_kube_config(config_file=kubeconfig, context=context)  # type: ignore[no-untyped-call]
        contexts, current = k8s_config.list_kube_config_contexts(kubeconfig)  # type: ignore[no-untyped-call]
    except (k8s_config.ConfigException, OSError) as error:
        sys.exit(f"streamconsumer: no usable kubeconfig: {error}")
    chosen = next((c for c in contexts if c.get("name") == context), None) if context else current
    found: str = ((chosen or {}).get("context") or {}).get("namespace") or "default"
    return namespace or found


def fetch(api: k8s.CustomObjectsApi, namespace: str, name: str) -> dict[str, Any]:
    """The object, its lease table inline even where lease groups keep it."""
    try:
        return read_consumer(api.api_client, namespace, name)
    except STATUS_ERRORS as error:
        sys.exit(f"streamconsumer: the lease table of {namespace}/{name}: {error}")


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


def _matching(pattern: str, longest: int, what: str) -> Callable[[str], str]:
    def checked(value: str) -> str:
        if len(value) > longest or not re.match(pattern, value):
            raise argparse.ArgumentTypeError(f"not a Kubernetes {what}: {value!r}")
        return value

    return checked


def _days(value: str) -> int:
    if not value.isdigit() or not 1 <= int(value) <= 365:
        raise argparse.ArgumentTypeError(f"--days takes 1 to 365, not {value!r}")
    return int(value)


def _seconds(value: str) -> float:
    try:
        seconds = float(value)
    except ValueError:
        seconds = 0.0
    if not seconds > 0:
        raise argparse.ArgumentTypeError(f"takes a number of seconds above 0, not {value!r}")
    return seconds


def _timestamp(value: str) -> datetime:
    try:
        position = parse_position(["timestamp", value], datetime.now(UTC))
    except ResetError as error:
        raise argparse.ArgumentTypeError(str(error)) from None
    assert position.timestamp is not None
    return position.timestamp


class _Position(argparse.Action):
    """reset's --to, parsed as it is read: `position` holds what it means."""

    def __call__(
        self,
        parser: argparse.ArgumentParser,
        namespace: argparse.Namespace,
        values: str | Sequence[Any] | None,
        option_string: str | None = None,
    ) -> None:
        words = [values] if isinstance(values, str) else [str(v) for v in values or ()]
        try:
            namespace.position = parse_position(words, datetime.now(UTC))
        except ResetError as error:
            raise argparse.ArgumentError(self, str(error)) from None
        setattr(namespace, self.dest, words)


def parser() -> argparse.ArgumentParser:
    # What every command that reads the cluster takes.
    cluster = argparse.ArgumentParser(add_help=False)
    cluster.add_argument(
        "-n",
        "--namespace",
        default=None,
        type=_matching(DNS_LABEL, 63, "namespace"),
        help="default: the context's",
    )
    cluster.add_argument("--kubeconfig", default=None)
    cluster.add_argument("--context", default=None, help="default: the kubeconfig's current one")
    name = _matching(DNS_SUBDOMAIN, 253, "name")
    top = argparse.ArgumentParser(prog="streamconsumer", description=__doc__)
    top.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    commands = top.add_subparsers(dest="command", required=True)
    status = commands.add_parser(
        "status", parents=[cluster], help="leases and conditions of a StreamConsumer"
    )
    status.add_argument("name", type=name)
    status.add_argument("--watch", action="store_true", help="refresh every 2 seconds")
    for verb, what in (("pause", "stop consuming"), ("resume", "consume again")):
        command = commands.add_parser(verb, parents=[cluster], help=f"{what}: sets spec.paused")
        command.add_argument("name", type=name)
    reset = commands.add_parser(
        "reset", parents=[cluster], help="move checkpoints (like a consumer group reset)"
    )
    reset.add_argument("name", type=name)
    reset.add_argument(
        "--to",
        nargs="+",
        required=True,
        action=_Position,
        metavar="POSITION",
        help="trim-horizon | latest | timestamp 2026-11-23T10:00:00Z",
    )
    reset.add_argument("--shard", action="append", default=[], help="only this shard (repeat)")
    reset.add_argument("--dry-run", action="store_true", help="show what would move, only")
    reset.add_argument("--timeout", type=_seconds, default=60.0, help="wait this long for it")
    checkpoints = commands.add_parser(
        "checkpoints", help="export a consumer's checkpoints as JSON, or import them"
    )
    moves = checkpoints.add_subparsers(dest="action", required=True)
    export = moves.add_parser("export", parents=[cluster], help="print NAME's lease table as JSON")
    export.add_argument("name", type=name)
    imported = moves.add_parser(
        "import",
        parents=[cluster],
        help="keep an exported table for a new StreamConsumer to resume from",
    )
    imported.add_argument("file", nargs="?", help="an exported table (- for standard input)")
    imported.add_argument(
        "--name", default=None, type=name, help="for this consumer (default: the table's)"
    )
    imported.add_argument("--days", type=_days, default=7, help="how long it may be resumed from")
    kcl = imported.add_argument_group(
        "from KCL", "a KCL application's lease table in DynamoDB (docs/migrating-from-kcl.md)"
    )
    kcl.add_argument("--from-kcl-table", metavar="TABLE", help="the KCL application's table")
    kcl.add_argument(
        "--for",
        dest="manifest",
        metavar="MANIFEST",
        help="the StreamConsumer (YAML) that goes on where KCL stopped",
    )
    kcl.add_argument(
        "--at-timestamp",
        type=_timestamp,
        default=None,
        help="for leases KCL started AT_TIMESTAMP: the time it was configured with",
    )
    kcl.add_argument(
        "--watch",
        type=_seconds,
        default=cli_kcl.WATCH_SECONDS,
        metavar="SECONDS",
        help="how long to watch for a KCL worker renewing its leases (default "
        f"{cli_kcl.WATCH_SECONDS:.0f}: KCL renews every third of failoverTimeMillis)",
    )
    cli_deadletters.add_parser(commands)
    return top


def main(argv: list[str] | None = None) -> None:
    arguments = parser()
    args = arguments.parse_args(argv)
    # Every argument is checked before the kubeconfig is read (reset's --to too, by
    # `_Position`): a typo is a usage error on any machine.
    if args.command == "checkpoints" and args.action == "import":
        _check_import(arguments, args)
    console = Console()
    if args.command == "deadletters":  # AWS only: no kubeconfig needed
        cli_deadletters.run(args, console, _text_of)
        return
    namespace = connect(args.kubeconfig, args.context, args.namespace)
    api = k8s.CustomObjectsApi()
    try:
        if args.command in ("pause", "resume"):
            paused = args.command == "pause"
            patched = ask(api, namespace, args.name, {"spec": {"paused": paused}})
            generation = patched.get("metadata", {}).get("generation") or 0

            def read() -> dict[str, Any]:
                got = api.get_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, args.name)
                return got if isinstance(got, dict) else {}

            took = taken_up(read, generation, TAKEN_UP_SECONDS)
            console.print(pause_outcome(f"{namespace}/{args.name}", paused, took))
            return
        if args.command == "reset":
            do_reset(api, namespace, args, console)
            return
        if args.command == "checkpoints":
            do_checkpoints(namespace, args, console)
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
        sys.exit(api_error(error, namespace, getattr(args, "name", None) or ""))
    except HTTPError as error:
        sys.exit(f"streamconsumer: cannot reach the API server: {error}")
    except KeyboardInterrupt:
        pass


def _check_import(arguments: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    """An exported file, or a KCL table with the manifest of the consumer: not both."""
    if args.from_kcl_table is None:
        if args.file is None:
            arguments.error("checkpoints import takes FILE, or --from-kcl-table and --for")
        if args.manifest is not None or args.at_timestamp is not None:
            arguments.error("--for and --at-timestamp go with --from-kcl-table")
        return
    if args.file is not None or args.name is not None:
        arguments.error("--from-kcl-table takes no FILE nor --name: the manifest names both")
    if args.manifest is None:
        arguments.error("--from-kcl-table needs --for MANIFEST, the StreamConsumer to start")


def do_checkpoints(namespace: str, args: argparse.Namespace, console: Console) -> None:
    errors = Console(stderr=True)
    try:
        if args.action == "export":
            text, note = cli_checkpoints.export(namespace, args.name)
            sys.stdout.write(text + "\n")
            errors.print(note)
            return
        text = _text_of(args.manifest if args.from_kcl_table else args.file)
        name = args.name
        if args.from_kcl_table:
            say = Console(stderr=True).print
            text, name = cli_kcl.kcl_table(
                args.from_kcl_table, text, namespace, args.days, args.at_timestamp, args.watch, say
            )
        console.print(cli_checkpoints.import_(text, namespace, name, args.days))
    except cli_checkpoints.CheckpointsError as error:
        sys.exit(f"streamconsumer: {error}")


def _text_of(path: str) -> str:
    """A file named on the command line (- for standard input), bounded."""
    try:
        return _bounded(sys.stdin) if path == "-" else _read(Path(path))
    except OSError as error:
        sys.exit(f"streamconsumer: cannot read {path}: {error.strerror}")


def _read(path: Path) -> str:
    with path.open() as file:
        return _bounded(file)


def _bounded(source: TextIO) -> str:
    """A table to import, read no further than any table a consumer may resume from."""
    text = source.read(UNPACKED_MAX_BYTES + 1)
    if len(text) > UNPACKED_MAX_BYTES:
        sys.exit(f"streamconsumer: not a table: larger than {UNPACKED_MAX_BYTES // 2**20} MiB")
    return text


def do_reset(
    api: k8s.CustomObjectsApi, namespace: str, args: argparse.Namespace, console: Console
) -> None:
    position: ResetPosition = args.position  # parsed before the kubeconfig was read
    try:
        body = fetch(api, namespace, args.name)
        shards = shards_to_reset(body.get("status") or {}, args.shard)
    except ResetError as error:
        sys.exit(f"streamconsumer: {error}")
    leases = (body.get("status") or {}).get("leases") or {}
    table = Table(title=f"reset {namespace}/{args.name} to {describe(position)}")
    for column in ("SHARD", "OWNER", "CHECKPOINT"):
        table.add_column(column, no_wrap=True)
    for shard_id in shards:
        lease = leases[shard_id]
        table.add_row(shard_id, lease.get("owner") or "-", lease.get("checkpoint") or "-")
    console.print(table)
    if args.dry_run or not shards:
        console.print("dry run: nothing changed" if args.dry_run else "no shard to reset")
        return
    request = ResetRequest(id=uuid.uuid4().hex[:12], to=position, shards=args.shard)
    patch = {
        "metadata": {"annotations": {RESET_ANNOTATION: request.model_dump_json(by_alias=True)}}
    }
    ask(api, namespace, args.name, patch)
    deadline = time.monotonic() + args.timeout
    while time.monotonic() < deadline:
        applied = (fetch(api, namespace, args.name).get("status") or {}).get("lastReset") or {}
        if applied.get("id") == request.id:
            done = applied.get("shards") or []
            console.print(f"reset {len(done)} shards; owners hand them off, then they resume")
            return
        time.sleep(1.0)
    sys.exit(
        f"streamconsumer: the operator has not applied reset {request.id} within "
        f"{args.timeout:.0f}s (is it running?); it will when it can"
    )


if __name__ == "__main__":
    main()
