"""GetRecords answers (Kinesis, DynamoDB Streams) decoded without botocore's parser.

botocore's JSON parser walks the output shape member by member, for every record: on an
answer of 1,000 records that costs about ten times the CPU of loading the JSON and
decoding its base64. `fast_get_records` hooks botocore's public `before-parse` event for
one client's GetRecords: an HTTP 200 answer is loaded with orjson and checked against the
shape declared here, field by field, while it is turned into exactly what botocore's
parser returns (blobs as bytes, timestamps as aware datetimes, absent fields absent).
That page goes to botocore in `customized_response_dict`, which it merges into its
result, and botocore is left the empty body `{}` to parse (it still adds the response
metadata). Signing, endpoints, retries and errors stay botocore's: an answer of any
other status is never touched, so throttling is retried as before.

Anything not exactly of the declared shape (a field we do not know, a value of another
type, a null where botocore would keep it, a body orjson refuses; any error of the
decoding itself) leaves the answer untouched and botocore parses it as it always did: a
new field AWS adds costs speed, never a record."""

from __future__ import annotations

import binascii
import logging
import threading
from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

import orjson

if TYPE_CHECKING:
    from botocore.client import BaseClient

log = logging.getLogger(__name__)

Decode = Callable[[Any], Any]
"""Checks a JSON value against a shape and turns it into botocore's form; raises
`Unexpected` on anything else."""


class Unexpected(ValueError):
    """The answer is not of the shape declared here: botocore parses it."""


# --- botocore's forms of the JSON protocol's values (botocore/parsers.py) ---------------


def string(value: Any) -> str:
    if type(value) is not str:
        raise Unexpected(f"not a string: {type(value).__name__}")
    return value


def long(value: Any) -> int:
    if type(value) is not int:  # bool is an int too; botocore gives JSON's value as is
        raise Unexpected(f"not an integer: {type(value).__name__}")
    return value


def boolean(value: Any) -> bool:
    if type(value) is not bool:
        raise Unexpected(f"not a boolean: {type(value).__name__}")
    return value


def blob(value: Any) -> bytes:
    """What botocore's base64.b64decode does with a str, without its wrapper (a third of
    the cost): lenient, as it is."""
    if type(value) is not str:
        raise Unexpected(f"not a base64 string: {type(value).__name__}")
    try:
        return binascii.a2b_base64(value)
    except (binascii.Error, ValueError) as error:
        raise Unexpected("not base64") from error


def timestamp(value: Any) -> datetime:
    """Epoch seconds, as botocore's parse_timestamp reads them (in UTC: the same instant
    and ISO form as its dateutil tzutc)."""
    if type(value) is not float and type(value) is not int:
        raise Unexpected(f"not epoch seconds: {type(value).__name__}")
    try:
        return datetime.fromtimestamp(value, UTC)
    except (OverflowError, OSError, ValueError) as error:
        raise Unexpected("epoch seconds out of range") from error


def structure(members: Mapping[str, Decode]) -> Decode:
    """A JSON object of some of `members`; botocore leaves an absent one absent, and a
    null one too (emulators send `"ChildShards": null`)."""

    def decode(value: Any) -> dict[str, Any]:
        if type(value) is not dict:
            raise Unexpected(f"not an object: {type(value).__name__}")
        decoded = {}
        for name, member in value.items():
            field = members.get(name)
            if field is None:
                raise Unexpected(f"unknown field {name!r}")
            if member is not None:
                decoded[name] = field(member)
        return decoded

    return decode


def list_of(item: Decode) -> Decode:
    def decode(value: Any) -> list[Any]:
        if type(value) is not list:
            raise Unexpected(f"not a list: {type(value).__name__}")
        return [item(each) for each in value]

    return decode


def map_of(item: Decode) -> Decode:
    def decode(value: Any) -> dict[str, Any]:
        if type(value) is not dict:
            raise Unexpected(f"not an object: {type(value).__name__}")
        for name, each in value.items():
            value[name] = item(each)
        return value

    return decode


# --- the answers -------------------------------------------------------------------------

KINESIS_PAGE = structure(
    {
        "Records": list_of(
            structure(
                {
                    "SequenceNumber": string,
                    "ApproximateArrivalTimestamp": timestamp,
                    "Data": blob,
                    "PartitionKey": string,
                    "EncryptionType": string,
                }
            )
        ),
        "NextShardIterator": string,
        "MillisBehindLatest": long,
        "ChildShards": list_of(
            structure(
                {
                    "ShardId": string,
                    "ParentShards": list_of(string),
                    "HashKeyRange": structure({"StartingHashKey": string, "EndingHashKey": string}),
                }
            )
        ),
    }
)


# The commonest values, whose JSON form is botocore's: checked, and kept as loaded.
_AS_LOADED = {"S": str, "N": str, "BOOL": bool, "NULL": bool}


def attribute_value(value: Any) -> Any:
    """One typed DynamoDB value ({"S": "a"}): DynamoDB sets exactly one member."""
    if type(value) is not dict or len(value) != 1:
        raise Unexpected("not an attribute value of one member")
    for kind, inner in value.items():
        if type(inner) is _AS_LOADED.get(kind):
            return value
    return _ATTRIBUTE_VALUE(value)


ATTRIBUTE_MAP = map_of(attribute_value)
_ATTRIBUTE_VALUE = structure(
    {
        "S": string,
        "N": string,
        "B": blob,
        "SS": list_of(string),
        "NS": list_of(string),
        "BS": list_of(blob),
        "M": ATTRIBUTE_MAP,
        "L": list_of(attribute_value),
        "NULL": boolean,
        "BOOL": boolean,
    }
)

STREAMS_PAGE = structure(
    {
        "Records": list_of(
            structure(
                {
                    "eventID": string,
                    "eventName": string,
                    "eventVersion": string,
                    "eventSource": string,
                    "awsRegion": string,
                    "dynamodb": structure(
                        {
                            "ApproximateCreationDateTime": timestamp,
                            "Keys": ATTRIBUTE_MAP,
                            "NewImage": ATTRIBUTE_MAP,
                            "OldImage": ATTRIBUTE_MAP,
                            "SequenceNumber": string,
                            "SizeBytes": long,
                            "StreamViewType": string,
                        }
                    ),
                    "userIdentity": structure({"PrincipalId": string, "Type": string}),
                }
            )
        ),
        "NextShardIterator": string,
    }
)

PAGES: dict[str, Decode] = {"kinesis": KINESIS_PAGE, "dynamodbstreams": STREAMS_PAGE}
"""botocore's service name -> its GetRecords answer."""


# --- the hook ----------------------------------------------------------------------------


class Decodes:
    """How one service's successful GetRecords answers were decoded in this process."""

    def __init__(self) -> None:
        self.fast = 0
        self.fallbacks = 0  # left to botocore's parser
        self._lock = threading.Lock()

    def count(self, fast: bool) -> int:
        """Counts one answer; how many fallbacks there were before it."""
        with self._lock:
            before = self.fallbacks
            if fast:
                self.fast += 1
            else:
                self.fallbacks += 1
            return before


DECODES = {service: Decodes() for service in PAGES}


class FastGetRecords:
    """The `before-parse` handler for one service's GetRecords."""

    def __init__(self, service: str) -> None:
        self.service = service
        self._page = PAGES[service]
        self._decodes = DECODES[service]

    def __call__(
        self, response_dict: dict[str, Any], customized_response_dict: dict[str, Any], **_: Any
    ) -> None:
        body = response_dict.get("body")
        if response_dict.get("status_code") != 200 or type(body) is not bytes:
            return  # errors are botocore's to parse, and to retry
        try:
            page = self._page(orjson.loads(body))
        except Exception as error:  # Unexpected, orjson's refusal, or a fault of ours
            # costs this answer its speed, never its records: botocore parses it.
            if self._decodes.count(fast=False) == 0:  # once: the next are alike
                log.warning(
                    "%s GetRecords: an answer botocore parses itself (%s); "
                    "further ones are counted, not logged",
                    self.service,
                    error,
                )
            return
        customized_response_dict.update(page)
        response_dict["body"] = b"{}"
        self._decodes.count(fast=True)


def fast_get_records(client: BaseClient) -> None:
    """Has `client` (Kinesis or DynamoDB Streams) decode its GetRecords answers here;
    again on the same client changes nothing."""
    model = client.meta.service_model
    if model.resolved_protocol != "json":  # a botocore that speaks CBOR to it: its own parser
        return
    handler = FastGetRecords(model.service_name)
    client.meta.events.register(
        f"before-parse.{model.service_id.hyphenize()}.GetRecords",
        handler,
        unique_id="streamconsumer-fast-get-records",
    )
