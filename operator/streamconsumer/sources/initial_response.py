"""A narrow tolerance for Kinesis endpoints whose SubscribeToShard stream lacks the
`initial-response` event (the `kinesis-local` emulator, kinesis-mock 0.6.x).

botocore (parsers.JSONParser._handle_event_stream) takes the stream's first message as
the `initial-response` and refuses the whole response otherwise ("First event was not of
type initial-response"), losing that first event with it. Real Kinesis always sends it.

`tolerate_missing_initial_response` hooks botocore's public `before-parse` event for
SubscribeToShard only and peeks at the first message: an `initial-response` (real
Kinesis) passes through byte for byte. A `SubscribeToShardEvent`, or an exception message
the stream models (the emulator refuses a second subscription with a ResourceInUseException
message as the first one), gets an empty `initial-response` put in front of it and nothing
else changes: botocore then yields the event, or raises the exception as an
EventStreamError (a ClientError with its code) while iterating. Anything else passes
through untouched, and botocore refuses it as it would anyway."""

from __future__ import annotations

import binascii
import logging
import struct
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

import botocore.session
from botocore.eventstream import EventStreamBuffer
from botocore.model import StructureShape

if TYPE_CHECKING:
    from mypy_boto3_kinesis import KinesisClient

log = logging.getLogger(__name__)
EVENT = "before-parse.kinesis.SubscribeToShard"
_STRING_HEADER = 7  # the event stream encoding's header value type for UTF-8 strings


def encode_message(headers: dict[str, str], payload: bytes) -> bytes:
    """One event stream message (prelude, string headers, payload, CRCs), as AWS frames it."""
    encoded = b"".join(
        struct.pack("!B", len(name))
        + name.encode()
        + struct.pack("!BH", _STRING_HEADER, len(value.encode()))
        + value.encode()
        for name, value in headers.items()
    )
    total = 12 + len(encoded) + len(payload) + 4
    prelude = struct.pack("!II", total, len(encoded))
    prelude += struct.pack("!I", binascii.crc32(prelude) & 0xFFFFFFFF)
    message = prelude + encoded + payload
    return message + struct.pack("!I", binascii.crc32(message) & 0xFFFFFFFF)


INITIAL_RESPONSE = encode_message(
    {
        ":message-type": "event",
        ":event-type": "initial-response",
        ":content-type": "application/json",
    },
    b"{}",
)


class _Prefixed:
    """The raw body botocore's EventStream reads (`stream()`, `close()`), with bytes
    already read from it (and perhaps an initial-response) put back in front."""

    def __init__(self, raw: Any, prefix: bytes, rest: Iterator[bytes]) -> None:
        self._raw = raw
        self._prefix = prefix
        self._rest = rest

    def stream(self, **_: Any) -> Iterator[bytes]:
        if self._prefix:
            yield self._prefix
        yield from self._rest

    def close(self) -> None:
        self._raw.close()


def _first_message(chunks: Iterator[bytes]) -> tuple[bytes, str | None]:
    """Reads until the first message is whole: (the bytes read, its event or exception
    type)."""
    read = b""
    for chunk in chunks:
        read += chunk
        if len(read) >= 4 and len(read) >= struct.unpack("!I", read[:4])[0]:
            break
    buffer = EventStreamBuffer()
    buffer.add_data(read)
    try:
        message = buffer.next()
    except Exception:  # incomplete or malformed: botocore reports it as it would
        return read, None
    headers = message.to_response_dict()["headers"]
    kind = headers.get(":message-type")
    name = headers.get(f":{kind}-type") if kind in ("event", "exception") else None
    return read, name if isinstance(name, str) else None


def _stream_members() -> frozenset[str]:
    """The events and exceptions botocore's model allows in a SubscribeToShard stream."""
    operation = botocore.session.get_session().get_service_model("kinesis")
    output = operation.operation_model("SubscribeToShard").output_shape
    assert output is not None
    assert isinstance(output, StructureShape)
    stream = output.members["EventStream"]
    assert isinstance(stream, StructureShape)
    return frozenset(stream.members)


_STREAM_MEMBERS = _stream_members()


def _put_back_initial_response(response_dict: dict[str, Any], **_: Any) -> None:
    if response_dict.get("status_code") != 200:
        return  # an error body, parsed as usual
    raw = response_dict["body"]
    chunks = iter(raw.stream())
    read, message_type = _first_message(chunks)
    prefix = read
    if message_type in _STREAM_MEMBERS:
        log.debug("SubscribeToShard began with %s: initial-response put in front", message_type)
        prefix = INITIAL_RESPONSE + read
    response_dict["body"] = _Prefixed(raw, prefix, chunks)


def tolerate_missing_initial_response(client: KinesisClient) -> None:
    """Let this client read SubscribeToShard streams that start with their first event."""
    client.meta.events.register(EVENT, _put_back_initial_response)
