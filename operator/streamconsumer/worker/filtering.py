"""`spec.processor.filter` applied to records (`models.record_filter`): a pure predicate
the ShardMachine asks before delivering; what it drops is checkpointed past without a
processor call. Each record's data is parsed as JSON at most once, and only when a
pattern has data conditions."""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from typing import Any

from streamconsumer.models.record_filter import FieldMatch, FilterPattern, RecordFilter, ValueMatch
from streamconsumer.processor import Record

Keep = Callable[[Record], bool]
_ABSENT = object()
log = logging.getLogger(__name__)


def keeper(spec: RecordFilter | None) -> Keep | None:
    """The predicate for `spec`: True for a record the processor gets. None: no filter."""
    if spec is None:
        return None
    patterns = spec.patterns

    def keep(record: Record) -> bool:
        data: Any = _ABSENT  # parsed on first need
        for pattern in patterns:
            key = pattern.partition_key
            if key is not None and not _holds(key, record.partition_key):
                continue  # decided without the data
            if pattern.data and data is _ABSENT:
                data = _json_object(record.data)  # RecursionError if nested too deep
            if _matches(pattern, record, data):
                return True
        return False

    def keep_or_deliver(record: Record) -> bool:
        # Raised in the reader thread, any error (a record nested too deep for json.loads)
        # would end it: the shard would read nothing more while held, silently. A record
        # the filter cannot judge is delivered.
        try:
            return keep(record)
        except Exception as error:
            log.warning("filter failed on %s, delivered: %r", record.sequence_number, error)
            return True

    return keep_or_deliver


def _matches(pattern: FilterPattern, record: Record, data: Any) -> bool:
    key = pattern.partition_key
    if key is not None and not _holds(key, record.partition_key):
        return False
    if pattern.data and data is None:
        return False  # not a JSON object: no data condition holds
    return all(_holds(match, _field(data, match)) for match in pattern.data)


def _json_object(data: bytes) -> dict[str, Any] | None:
    try:
        value = json.loads(data)
    except ValueError:  # not JSON, or not UTF-8
        return None
    return value if isinstance(value, dict) else None


def _field(data: dict[str, Any], match: FieldMatch) -> Any:
    value: Any = data
    for key in match.path.split("."):
        if not isinstance(value, dict) or key not in value:
            return _ABSENT
        value = value[key]
    return value


def _holds(match: ValueMatch, value: Any) -> bool:
    if match.exists is not None:
        return (value is not _ABSENT) == match.exists
    text = _text(value)
    if text is None:
        return False  # absent, an object or a list: only `exists` looks at those
    if match.equals is not None:
        return text == match.equals
    if match.equals_any is not None:
        return text in match.equals_any
    assert match.prefix is not None, "the model allows exactly one condition"
    return text.startswith(match.prefix)


def _text(value: Any) -> str | None:
    """A scalar as the filter compares it: a string as it is, others as JSON text."""
    if isinstance(value, str):
        return value
    if value is None or isinstance(value, (bool, int, float)):
        return json.dumps(value)
    return None
