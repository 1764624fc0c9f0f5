"""`streamconsumer deadletters list|show|redrive --for MANIFEST`: a consumer's dead letters,
read back from the target its manifest names (`spec.processor.onFailure.deadLetter`), and
delivered again once the bug is fixed (docs/failure-policy.md#redrive).

Reads with your own AWS credentials and configuration, as the AWS CLI does; `redrive`
runs the manifest's processor here (its entrypoint must import where you run it: in the
processor's image, `kubectl run` or `docker run` it with this command), or puts the
records to the stream `--to-stream` names. Needs no cluster access."""

from __future__ import annotations

import argparse
import json
import re
import sys
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import boto3
from botocore.exceptions import BotoCoreError, ClientError
from rich.console import Console
from rich.markup import escape
from rich.progress import Progress
from rich.table import Table

from streamconsumer.cli_checkpoints import CheckpointsError
from streamconsumer.cli_kcl import consumer_of
from streamconsumer.deadletter import inbox, redrive
from streamconsumer.deadletter.inbox import Held, InboxError
from streamconsumer.loading import load_processor
from streamconsumer.models.failure import DeadLetterTarget
from streamconsumer.models.resource import DNS_LABEL, DNS_SUBDOMAIN, StreamConsumerSpec
from streamconsumer.sources.aws import aws_error

MAX_LETTERS = 10_000  # read back in one run at most (--max)
SHOWN_ERROR_CHARS = 120


class DeadLettersError(Exception):
    """What stops the command, in one line."""


def add_parser(commands: Any) -> None:
    """`deadletters` and its actions, on the top parser's subcommands."""
    letters = commands.add_parser(
        "deadletters", help="list, show or redrive a consumer's dead letters"
    )
    actions = letters.add_subparsers(dest="action", required=True)
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument(
        "--for", dest="manifest", required=True, metavar="MANIFEST", help="the StreamConsumer"
    )
    common.add_argument(
        "-n", "--namespace", default="default", help="its namespace, if the manifest has none"
    )
    common.add_argument(
        "--max", type=int, default=MAX_LETTERS, help=f"letters read at most (default {MAX_LETTERS})"
    )
    common.add_argument(
        "--ledger",
        type=Path,
        default=None,
        help="a Kinesis target's record of what was redriven (default: ./NAME.redriven.json)",
    )
    actions.add_parser("list", parents=[common], help="letters per shard, with their errors")
    show = actions.add_parser("show", parents=[common], help="one letter, its data decoded")
    show.add_argument("shard")
    show.add_argument("sequence")
    again = actions.add_parser(
        "redrive", parents=[common], help="deliver the letters again, then remove them"
    )
    again.add_argument(
        "--to-stream", metavar="STREAM", help="put the records to this Kinesis stream instead"
    )
    again.add_argument(
        "--batch", type=int, default=100, help="records per process_records call (default 100)"
    )


def run(args: argparse.Namespace, console: Console, read_manifest: Callable[[str], str]) -> None:
    try:
        if not 1 <= args.max <= 10 * MAX_LETTERS:
            raise DeadLettersError(f"--max must be from 1 to {10 * MAX_LETTERS}")
        name, spec, namespace = _consumer(read_manifest(args.manifest), args.namespace)
        consumer = f"{namespace}/{name}"
        ledger = args.ledger or Path(f"{namespace}.{name}.redriven.json")
        box = inbox.inbox_for(_target(spec, consumer), ledger)
        if args.action == "redrive":
            _redrive(box, consumer, spec, args, console)
            return
        letters = box.letters(consumer, args.max + 1, hold=False)
        if args.action == "list":
            console.print(listing(letters[: args.max], consumer, box.name))
            if box.truncated or len(letters) > args.max:
                console.print(f"(and more: --max {args.max} read no further)", markup=False)
            for key in box.skipped:
                console.print(f"(not read, over 256 MiB: {key})", markup=False)
        else:
            sys.stdout.write(shown(letters, args.shard, args.sequence) + "\n")
    except (DeadLettersError, InboxError, CheckpointsError) as error:
        sys.exit(f"streamconsumer: {error}")
    except (BotoCoreError, ClientError) as error:
        problem = aws_error(error)
        sys.exit(f"streamconsumer: AWS: {' '.join(filter(None, problem))}")
    except KeyboardInterrupt:
        sys.exit("streamconsumer: interrupted; what was redriven is removed, the rest stays")


def _consumer(text: str, namespace: str) -> tuple[str, StreamConsumerSpec, str]:
    """The manifest's name, spec and namespace (`namespace` if it names none), each a
    Kubernetes name: they name letters and the ledger file."""
    name, spec, declared = consumer_of(text)
    namespace = declared or namespace
    if not re.fullmatch(DNS_SUBDOMAIN, name) or len(name) > 253:
        raise DeadLettersError(f"metadata.name {name[:80]!r} is not a Kubernetes name")
    if not re.fullmatch(DNS_LABEL, namespace) or len(namespace) > 63:
        raise DeadLettersError(f"namespace {namespace[:80]!r} is not a Kubernetes name")
    return name, spec, namespace


def _target(spec: StreamConsumerSpec, consumer: str) -> DeadLetterTarget:
    target = spec.processor.on_failure.dead_letter
    if target is None:
        raise DeadLettersError(
            f"{consumer} has no dead-letter target (spec.processor.onFailure.deadLetter)"
        )
    return target


def listing(letters: list[Held], consumer: str, where: str) -> Table:
    table = Table(title=escape(f"{len(letters)} dead letters of {consumer} in {where}"))
    for column in ("SHARD", "LETTERS", "FIRST", "LAST", "MOST COMMON ERROR"):
        table.add_column(column, no_wrap=column != "MOST COMMON ERROR")
    for shard, held in redrive.by_shard(letters):
        errors = Counter(str(h.document.get("error") or "") for h in held)
        error, count = errors.most_common(1)[0]
        first, last = held[0].document["sequenceNumber"], held[-1].document["sequenceNumber"]
        text = error[:SHOWN_ERROR_CHARS] + (f" ({count} of {len(held)})" if len(errors) > 1 else "")
        cells = (shard, str(len(held)), str(first), str(last), text)
        table.add_row(*(escape(cell) for cell in cells))
    return table


def shown(letters: list[Held], shard: str, sequence: str) -> str:
    matching = [
        h for h in letters if h.shard_id == shard and h.document["sequenceNumber"] == sequence
    ]
    if not matching:
        raise DeadLettersError(f"no dead letter of shard {shard} at sequence {sequence}")
    document = dict(matching[0].document)
    data = matching[0].record().data
    try:
        document["data"] = data.decode()
    except UnicodeDecodeError:
        document["dataBase64"] = document.pop("data")
    return json.dumps(document, indent=2)


def _redrive(
    box: inbox.Inbox,
    consumer: str,
    spec: StreamConsumerSpec,
    args: argparse.Namespace,
    console: Console,
) -> None:
    if not 1 <= args.batch <= spec.reading.max_records:
        raise DeadLettersError(f"--batch must be from 1 to {spec.reading.max_records}")
    factory = None
    if not args.to_stream:  # before any letter is held
        try:
            factory = load_processor(spec.processor.entrypoint)
        except Exception as error:  # the user's module, imported: any error is theirs
            raise DeadLettersError(f"{type(error).__name__}: {error}") from None
    letters = box.letters(consumer, args.max + 1, hold=True)
    removed: set[int] = set()

    def done(held: list[Held]) -> None:
        box.remove(held)
        removed.update(id(letter) for letter in held)

    try:
        if box.truncated or len(letters) > args.max or box.skipped:
            raise DeadLettersError(
                f"more dead letters than --max {args.max} reads (or an S3 object over "
                "256 MiB): each shard's are redriven in order only when all are read; "
                "raise --max"
            )
        if not letters:
            console.print(f"no dead letters of {consumer} in {box.name}", markup=False)
            return
        with Progress(console=console, transient=True) as progress:
            task = progress.add_task("redriving", total=len(letters))

            def advanced(count: int) -> None:
                progress.advance(task, count)

            if factory is None:
                client = boto3.client("kinesis")
                stream = {"StreamName": args.to_stream}
                outcome = redrive.to_stream(letters, client, stream, advanced, done)
            else:
                outcome = redrive.to_processor(
                    letters, factory, consumer, args.batch, advanced, done
                )
    finally:  # letters held and not redriven are shown again at once, whatever happened
        box.release([held for held in letters if id(held) not in removed])
    where = f"the stream {args.to_stream}" if args.to_stream else spec.processor.entrypoint
    console.print(
        f"redrove {len(outcome.redriven)} of {len(letters)} dead letters to {where}", markup=False
    )
    for shard, why in sorted(outcome.failed.items()):
        console.print(f"  {shard}: stopped, {why}; its other letters stay", markup=False)
    if outcome.failed:
        sys.exit(1)
