"""The worker's configuration, passed as environment variables by the pod template the
operator writes. One model names them for both sides."""

from __future__ import annotations

import os
from typing import Any

from pydantic import BaseModel, Field, ValidationError, field_validator, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from streamconsumer.models.base import ADDED_SINCE, added_since
from streamconsumer.models.failure import FailurePolicy
from streamconsumer.models.record_filter import RecordFilter
from streamconsumer.models.resource import (
    DEFAULT_MAX_RECORDS,
    MAX_BATCH_SIZE,
    MAX_BATCHING_WINDOW_SECONDS,
    MAX_PARALLELISM,
    MAX_PROCESSES,
    MAX_READS_PER_SECOND,
    LogLevel,
)
from streamconsumer.sources.registry import KINDS, kind_named

PREFIX = "STREAMCONSUMER_"
# The order 0.2's flat fields had; a kind's own settings come after these.
SOURCE_SETTINGS_ORDER = (
    "stream_name",
    "table_name",
    "stream_arn",
    "region",
    "kinesis_consumer",
    "endpoint_url",
)


class WorkerConfig(BaseSettings):
    model_config = SettingsConfigDict(env_prefix=PREFIX, extra="ignore")

    operator_url: str = Field(pattern=r"^https?://")
    namespace: str
    consumer: str
    worker_name: str
    token_path: str
    # The operator's CA certificate: an https:// operator must present a certificate it
    # signed, or the worker sends it nothing (not even its token). None: the system's CAs.
    ca_path: str | None = None
    entrypoint: str
    # The kind of stream (sources/registry.py) and its own settings, each in a variable of
    # its own (STREAMCONSUMER_STREAM_NAME...: the kind's `setting_names`, named as every
    # release names them, so a worker reads the pod template of an operator of another
    # version, docs/upgrades.md#operator-and-workers-of-different-versions).
    source: str = "kinesis"
    source_settings: dict[str, str] = Field(default_factory=dict)
    # Enhanced fan-out renews each subscription this often (tests shorten it); None: the
    # kind's own period.
    resubscribe_seconds: float | None = Field(default=None, gt=0)
    max_records: int = DEFAULT_MAX_RECORDS
    idle_between_reads_ms: int = 500
    prefetch: int = 3
    max_reads_per_second: float = Field(
        default=MAX_READS_PER_SECOND, gt=0, json_schema_extra=added_since("0.2.0")
    )
    metrics_port: int | None = Field(default=None, ge=0, le=65535)  # None or 0: no metrics
    # A process of several serves its metrics on localhost only: the pod's port serves
    # them all (worker/processes.py).
    metrics_address: str = Field(default="0.0.0.0", json_schema_extra=added_since("0.2.0"))
    # SIGTERM: hand every shard off within this (the pod's grace period, less a margin).
    drain_seconds: float = Field(default=25.0, gt=0)
    # Exit (non-zero) once the operator has refused this worker for this long: its pod
    # was deleted, or its StreamConsumer is gone.
    give_up_seconds: float = Field(default=30.0, gt=0)
    on_failure: FailurePolicy = Field(default_factory=FailurePolicy)  # JSON in the env
    processor_log_level: LogLevel = Field(
        default=LogLevel.INFO, json_schema_extra=added_since("0.2.0")
    )
    # processor.filter, JSON in the env (a worker of 0.1 ignores it: it processes all).
    filter: RecordFilter | None = Field(default=None, json_schema_extra=added_since("0.2.0"))
    # processor.parallelism (a worker of 0.1 ignores it: it makes one call at a time).
    parallelism: int = Field(
        default=1, ge=1, le=MAX_PARALLELISM, json_schema_extra=added_since("0.2.0")
    )
    # processor.batchSize (None: a read's records in one call).
    batch_size: int | None = Field(
        default=None, ge=1, le=MAX_BATCH_SIZE, json_schema_extra=added_since("0.2.0")
    )

    # processor.processes (a worker of 0.1 ignores it: it runs one process).
    processes: int = Field(
        default=1, ge=1, le=MAX_PROCESSES, json_schema_extra=added_since("0.2.0")
    )
    # reading.maxBatchingWindowSeconds (a worker of 0.1 ignores it: each read is a call).
    max_batching_window_seconds: float = Field(
        default=0,
        ge=0,
        le=MAX_BATCHING_WINDOW_SECONDS,
        json_schema_extra=added_since("0.2.0"),
    )

    @model_validator(mode="before")
    @classmethod
    def _kind_settings_apart(cls, values: Any) -> Any:
        """A kind's settings given flat, as the environment names them, go into
        `source_settings`."""
        if not isinstance(values, dict):
            return values
        names = setting_names()
        given = {k: str(v) for k, v in values.items() if k in names and v is not None}
        rest = {k: v for k, v in values.items() if k not in names}
        return {**rest, "source_settings": {**rest.get("source_settings", {}), **given}}

    @field_validator("source")
    @classmethod
    def _known_kind(cls, source: str) -> str:
        kind_named(source)  # a clear error for a kind this worker does not know
        return source

    @staticmethod
    def env_name(field: str) -> str:
        return PREFIX + field.upper()

    def to_env(self) -> dict[str, str]:
        """The settings, but those a release added (`added_since`) only where they differ
        from their default: the workers' pod template stays as the previous release made
        it, so an operator upgrade does not roll every consumer's workers
        (docs/upgrades.md#operator-and-workers-of-different-versions)."""
        env = {}
        for name, field in type(self).model_fields.items():
            value = getattr(self, name)
            if name == "source_settings":
                env.update(self._source_env())
                continue
            added = (
                isinstance(field.json_schema_extra, dict) and ADDED_SINCE in field.json_schema_extra
            )
            if added and value == field.get_default(call_default_factory=True):
                continue
            if isinstance(value, BaseModel):
                env[self.env_name(name)] = value.model_dump_json(by_alias=True, exclude_none=True)
            elif value is not None:
                env[self.env_name(name)] = str(value)
        return env

    def _source_env(self) -> dict[str, str]:
        """The kind's settings where the releases before kinds were modules put them (their
        fields' order): a pod template in another order is another template, and the
        Deployment would roll every worker on an operator upgrade."""
        known = {name: i for i, name in enumerate(SOURCE_SETTINGS_ORDER)}
        ordered = sorted(
            self.source_settings.items(), key=lambda item: known.get(item[0], len(known))
        )
        return {self.env_name(name): value for name, value in ordered}

    @classmethod
    def from_env(cls) -> WorkerConfig:
        """From the process environment (pydantic-settings); a clear exit on bad input."""
        named = {name: os.environ.get(cls.env_name(name)) for name in setting_names()}
        try:
            return cls(source_settings={k: v for k, v in named.items() if v is not None})
        except ValidationError as error:
            missing = [
                cls.env_name(str(e["loc"][0])) for e in error.errors() if e["type"] == "missing"
            ]
            if missing:
                raise SystemExit(f"worker: missing environment: {', '.join(missing)}") from None
            problems = "; ".join(
                f"{cls.env_name(str(e['loc'][0]))}: {e['msg']}" for e in error.errors()
            )
            raise SystemExit(f"worker: bad configuration: {problems}") from None


def setting_names() -> set[str]:
    """Every kind's own settings (`StreamKind.setting_names`)."""
    return {name for kind in KINDS.values() for name in kind.settings}
