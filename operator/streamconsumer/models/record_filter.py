"""`spec.processor.filter`: which records reach the processor, as Lambda's FilterCriteria
but smaller. A record is processed when it matches any pattern; a pattern matches when
all its conditions hold, on the partition key and on fields of the record's JSON data.
Records filtered out are checkpointed past without a call (`worker/filtering.py`)."""

from __future__ import annotations

from typing import Annotated

from pydantic import Field, StringConstraints, model_validator

from streamconsumer.models.base import Model, with_rules

MAX_VALUE = 1024
Value = Annotated[str, StringConstraints(max_length=MAX_VALUE)]


class ValueMatch(Model):
    """One condition on a value. Strings compare as they are; a number, boolean or null
    in the JSON data as its JSON text (`500`, `true`, `null`)."""

    model_config = with_rules(
        (
            "[has(self.equals), has(self.equalsAny), has(self.prefix), has(self.exists)]"
            ".filter(x, x).size() == 1",
            "set exactly one of equals, equalsAny, prefix and exists",
        ),
    )

    equals: Value | None = None
    equals_any: list[Value] | None = Field(default=None, min_length=1, max_length=64)
    prefix: str | None = Field(default=None, min_length=1, max_length=MAX_VALUE)
    exists: bool | None = Field(
        default=None, description="true: the field is there (any value); false: it is not."
    )

    @model_validator(mode="after")
    def _one_condition(self) -> ValueMatch:
        """The CRD's rule, kept here too: the worker never guesses which one was meant."""
        given = [self.equals, self.equals_any, self.prefix, self.exists]
        if sum(value is not None for value in given) != 1:
            raise ValueError("set exactly one of equals, equalsAny, prefix and exists")
        return self


class FieldMatch(ValueMatch):
    """A condition on a field of the record's data, read as a JSON object."""

    path: str = Field(
        max_length=256,
        pattern=r"^[^.]+(\.[^.]+)*$",
        description="Dot-separated keys into the JSON object, e.g. `detail.type`.",
    )


class FilterPattern(Model):
    """Every condition of a pattern must hold."""

    model_config = with_rules(
        (
            "has(self.partitionKey) || (has(self.data) && size(self.data) > 0)",
            "a filter pattern needs partitionKey or data conditions",
        ),
    )

    partition_key: ValueMatch | None = None
    data: list[FieldMatch] = Field(
        default_factory=list,
        max_length=16,
        description="Conditions on the data's JSON fields. A record whose data is not a "
        "JSON object meets none of them (a DynamoDB stream record's data is its JSON).",
    )


class RecordFilter(Model):
    patterns: list[FilterPattern] = Field(
        min_length=1,
        max_length=16,
        description="A record is processed when it matches any of these patterns.",
    )
