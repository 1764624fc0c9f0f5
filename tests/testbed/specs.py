"""StreamConsumer specs for tests, built in one place."""

from __future__ import annotations

from typing import Any

from streamconsumer.models.resource import StreamConsumerSpec


def consumer_spec(*, lease_seconds: float | None = None, **fields: Any) -> StreamConsumerSpec:
    """A valid spec: Kinesis stream "s" read by processor "m:f" unless `fields` (spec
    fields by their API names: source=..., processor=..., initialPosition=...) say
    otherwise; leases of `lease_seconds` where given, else the default."""
    body: dict[str, Any] = {
        "source": {"kinesis": {"streamName": "s"}},
        "processor": {"image": "i", "entrypoint": "m:f"},
    }
    if lease_seconds is not None:
        body["leases"] = {"durationSeconds": lease_seconds}
    return StreamConsumerSpec.model_validate(body | fields)
