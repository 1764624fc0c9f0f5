"""The shared pydantic bases: camelCase on the wire (Kubernetes style), snake_case in Python.

Two kinds of model, two attitudes to fields they do not know:
- `Model` (the custom resource: spec, status) refuses them. The CRD schema is generated
  from these models and a typo in a spec must be an error, not silently ignored.
- `WireModel` (the worker <-> operator messages) ignores them. Workers run in users'
  images, so an operator and its workers are often of different versions; a field added
  by a newer side must not break an older one (docs/design.md#versions-differ)."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, ValidationError
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


class WireModel(Model):
    """A message between worker and operator: unknown fields are ignored (and dropped),
    so either side may be the newer one."""

    model_config = ConfigDict(extra="ignore")


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


# A custom endpoint: scheme, host name or IPv4 address, port, path; nothing else (no
# userinfo, backslash, query or escapes, which URL parsers read differently: one could
# check a host that another then does not connect to; docs/security.md#aws-access).
ENDPOINT_URL_PATTERN = r"^https?://[A-Za-z0-9.-]+(:[0-9]{1,5})?(/[A-Za-z0-9._~/-]*)?$"


ADDED_SINCE = "x-streamconsumer-added-since"


def added_since(release: str) -> dict[str, Any]:
    """json_schema_extra for a field the previous release does not know. In the CRD it gets
    no default, so no object carries it unless a user sets it (streamconsumer/crd.py); in
    the workers' settings it is left out of the pod template while at its default
    (worker/config.py)."""
    return {ADDED_SINCE: release}


def first_error(error: ValidationError) -> str:
    """Where the first of pydantic's errors is, and what it says: `a.b: the message`."""
    first = error.errors()[0]
    return f"{'.'.join(str(part) for part in first['loc'])}: {first['msg']}"
