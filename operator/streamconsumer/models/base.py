"""The shared pydantic base: camelCase on the wire (Kubernetes style), snake_case in Python."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict
from pydantic.alias_generators import to_camel


class Model(BaseModel):
    model_config = ConfigDict(
        alias_generator=to_camel,
        populate_by_name=True,
        extra="forbid",
        use_enum_values=False,
    )

    def wire(self) -> dict[str, Any]:
        """The JSON-ready, camelCase form, without unset optional fields."""
        return self.model_dump(mode="json", by_alias=True, exclude_none=True)


def with_rules(*rules: tuple[str, str]) -> ConfigDict:
    """Model config carrying CEL validation rules (rule, message) into the CRD schema."""
    return ConfigDict(
        alias_generator=to_camel,
        populate_by_name=True,
        extra="forbid",
        json_schema_extra={
            "x-kubernetes-validations": [{"rule": rule, "message": msg} for rule, msg in rules]
        },
    )
