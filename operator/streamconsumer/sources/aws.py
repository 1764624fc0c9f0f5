"""AWS one way for every source, dead-letter target and the operator: how a client is
set up (`client_options`, and a stream reader's `reader_client`) and what a failed call
says (`aws_error`)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Literal, NamedTuple, TypedDict, Unpack

import boto3
from botocore.config import Config
from botocore.exceptions import BotoCoreError, ClientError
from botocore.parsers import ResponseParserError

from streamconsumer.sources.fast_decode import fast_get_records

if TYPE_CHECKING:
    from streamconsumer.sources.kind import Identity


def client_options(
    region: str | None,
    endpoint_url: str | None,
    max_attempts: int = 5,
    read_timeout: float = 10.0,
) -> dict[str, Any]:
    """boto3.client's keywords for calls that end in seconds, not botocore's default
    minute: a stalled call must never hold a lease loop or a shard longer than a lease.
    Throttling and transient errors are retried (standard mode: jittered back-off)."""
    config = Config(
        retries={"mode": "standard", "max_attempts": max_attempts},
        connect_timeout=5,
        read_timeout=read_timeout,
        tcp_keepalive=True,
    )
    return {"region_name": region, "endpoint_url": endpoint_url, "config": config}


class ClientLimits(TypedDict, total=False):
    """`client_options`' limits, passed on by a function that takes them too (their
    defaults are client_options' own)."""

    max_attempts: int
    read_timeout: float


class ReaderOptions(ClientLimits, total=False):
    """What a stream reader's client takes beyond its region and endpoint."""

    identity: Identity


def reader_client(
    service: Literal["kinesis", "dynamodbstreams"],
    region: str | None,
    endpoint_url: str | None,
    identity: Identity = None,
    **limits: Unpack[ClientLimits],
) -> Any:
    """A `service` client whose calls end in seconds (`client_options`), made as
    `identity`, that decodes its GetRecords answers fast (`fast_get_records`). The
    caller names its type (KinesisClient, DynamoDBStreamsClient)."""
    options = client_options(region, endpoint_url, **limits)
    if identity is None:
        client = boto3.client(service, **options)
    else:
        client = identity.client(service, **options)
    fast_get_records(client)
    return client


class AwsError(NamedTuple):
    code: str  # "" when the error is not an AWS service's answer
    message: str


MAX_REMOTE_TEXT = 200  # characters of a remote party's words we pass on
MAX_ERROR_CODE = 64
NOT_AWS = "the endpoint's answer is not an AWS service's (not shown)"


def summary(text: str, limit: int = MAX_REMOTE_TEXT) -> str:
    """Words from the other end as we show them (status, Events, logs): printable, one
    line, bounded. An endpoint may be anything a spec names; its answer must not become
    ours to publish."""
    flat = " ".join("".join(c if c.isprintable() else " " for c in text).split())
    return flat if len(flat) <= limit else flat[: limit - 1] + "…"


def aws_error(error: BaseException) -> AwsError:
    """The service's error code and message of a failed call (botocore's ClientError,
    and EventStreamError, its subclass for errors inside an event stream); for any other
    exception no code, and the exception's text; each a bounded `summary`. An answer
    that is not an AWS service's (no error code of its own; botocore could not parse
    it) is never quoted: its text would be the raw body."""
    if isinstance(error, ClientError):
        details = error.response.get("Error", {})
        code = summary(str(details.get("Code") or ""), MAX_ERROR_CODE)
        if code.isdigit():  # botocore names an unparsed answer by its HTTP status
            return AwsError("", f"HTTP {code}: {NOT_AWS}")
        return AwsError(code, summary(str(details.get("Message") or error)))
    if isinstance(error, ResponseParserError):
        return AwsError("", NOT_AWS)
    if isinstance(error, BotoCoreError | TimeoutError | OSError):  # botocore's words
        return AwsError("", summary(str(error)))
    # Anything else (a ValueError reading a shard list, say) may quote the answer.
    return AwsError("", f"{type(error).__name__} reading the endpoint's answer (not shown)")
