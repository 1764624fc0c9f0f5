"""Instants the unit tests share."""

from datetime import UTC, datetime

CREATED = datetime(2026, 1, 1, tzinfo=UTC)
"""A StreamConsumer's creationTimestamp: where `initialPosition: LATEST` starts."""
