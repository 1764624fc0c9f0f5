"""DynamoDB Streams, as a stream kind: its spec (`spec.source.dynamodbStreams`), its
worker settings, what the access policy matches, and its reader
(`sources/dynamodb_streams.py`, imported when a stream is read)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from streamconsumer.models.source import (
    ENDPOINT_SETTINGS,
    AwsStreamSource,
    arn_field,
    name_field,
    named_once,
)
from streamconsumer.sources.kind import Access, Identity, ReaderSettings, StreamKind

if TYPE_CHECKING:
    from streamconsumer.sources.base import StreamSource


class DynamoDBStreamsSpec(AwsStreamSource):
    """Where to read: a DynamoDB table's change stream, by table name (its latest stream)
    or by stream ARN. Like a Kinesis stream, it cannot change under a consumer. A custom
    endpoint serves both DynamoDB and DynamoDB Streams (DynamoDB Local in tests)."""

    model_config = named_once("dynamodbStreams", "tableName")

    table_name: str | None = name_field(
        3,
        255,
        "Name of the table (in `region`); its latest stream is read. The table needs a "
        "stream (StreamSpecification), NEW_AND_OLD_IMAGES for both images.",
    )
    stream_arn: str | None = arn_field(
        r"^arn:aws[a-z-]*:dynamodb:[a-z0-9-]+:[0-9]{12}:table/[a-zA-Z0-9_.-]+"
        r"/stream/[0-9A-Za-z:._-]+$",
        "ARN of the table's stream (DescribeTable's LatestStreamArn).",
    )


# The reader imports boto3: only where a stream is read, never to build the CRD.
def lister(spec: DynamoDBStreamsSpec, identity: Identity) -> StreamSource:
    from streamconsumer.sources import dynamodb_streams

    return dynamodb_streams.source(spec, identity=identity)


def reader(spec: DynamoDBStreamsSpec, settings: ReaderSettings) -> StreamSource:
    from streamconsumer.sources import dynamodb_streams

    return dynamodb_streams.source(spec, settings.max_records)


# The worker's settings, as every release names them.
SETTINGS = {"table_name": "table_name", "stream_arn": "stream_arn", **ENDPOINT_SETTINGS}


def names(spec: DynamoDBStreamsSpec) -> tuple[str, str | None]:
    arn = spec.stream_arn
    return (spec.table_name or str(arn).split(":table/", 1)[-1].split("/", 1)[0]), arn


ACTIONS = (
    "dynamodb:ListStreams",
    "dynamodb:DescribeStream",
    "dynamodb:GetShardIterator",
    "dynamodb:GetRecords",
)

ERRORS = {
    "ResourceNotFoundException": "no such table or stream, or not in this region and account",
    "AccessDeniedException": f"the operator needs {', '.join(ACTIONS)} (ListStreams with "
    "tableName)",
}

KIND = StreamKind(
    name="dynamodbStreams",
    title="DynamoDB Streams",
    spec=DynamoDBStreamsSpec,
    lister=lister,
    reader=reader,
    settings=SETTINGS,
    access=Access(
        names=names,
        noun="table",
        services=("dynamodb", "streams.dynamodb"),
        actions=ACTIONS,
    ),
    at_timestamp=False,
    errors=ERRORS,
)
