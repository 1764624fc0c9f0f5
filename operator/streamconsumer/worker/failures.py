"""The failure policy of one held shard (`models.failure`, docs/failure-policy.md): how
often its head batch failed and since when, when to try again, when its retries are used
up, which of its records are too old to retry, and what a dead-letter write that failed
or can never succeed does. The `ShardMachine` asks and tells it; it never touches the
batches. Pure: times are given to it."""

from __future__ import annotations

from collections.abc import Sequence

from streamconsumer.core.backoff import Backoff
from streamconsumer.models.api import Failing
from streamconsumer.models.failure import AfterRetries, FailurePolicy
from streamconsumer.processor import Record


class Failures:
    def __init__(self, policy: FailurePolicy | None = None, retry: Backoff | None = None) -> None:
        self.policy = policy or FailurePolicy()
        self._retry = retry or Backoff(
            base=self.policy.initial_backoff_seconds, cap=self.policy.max_backoff_seconds
        )
        self.count = 0  # the head call's failures
        self.since: float | None = None  # the head call's first failure
        self.error = ""  # what it raised last
        self.retry_at = -float("inf")  # a processor call that raised, after back-off
        self._dead_letter_failures = 0
        self.unwritable = ""  # why the head batch's dead letters never can be written
        self.unwritable_in: frozenset[tuple[int, int]] = frozenset()  # the letters refused
        self.too_old = 0  # the head batch's first n records are past maxRecordAgeSeconds

    @property
    def then(self) -> AfterRetries:
        return self.policy.then

    def failed(self, now: float, error: str, too_old: int | None = None) -> None:
        """The head call failed (`too_old`: how many of its first records are past their
        age, when the call was a Deliver): retried after a back-off."""
        self.retry_at = now + self._retry.delay(self.count)
        self.count += 1
        self.error = error
        if self.since is None:
            self.since = now
        if too_old is not None:
            self.too_old = too_old

    def recovered(self) -> None:
        """The head call returned, or its batch was passed over: the count starts over."""
        self.count = self._dead_letter_failures = 0
        self.since = None
        self.error = self.unwritable = ""
        self.unwritable_in = frozenset()
        self.too_old = 0

    def restart_count(self) -> None:
        """The head is a new piece (a bisection): one attempt of its own."""
        self.count, self.since = 0, None

    def letters_failed(self, now: float, given_up: str, error: str) -> None:
        """The dead-letter target failed: write again after a back-off."""
        self.error = f"{given_up} (dead-letter target: {error})"
        self.retry_at = now + self._retry.delay(self._dead_letter_failures)
        self._dead_letter_failures += 1

    def letters_refused(
        self, now: float, reason: str, positions: frozenset[tuple[int, int]]
    ) -> None:
        """A letter its target can never hold: the batch blocks as under `block`."""
        self.unwritable = reason
        self.unwritable_in = positions
        self.retry_at = now + self._retry.delay(self.count)

    def letters_due_again(self, done: frozenset[tuple[int, int]]) -> None:
        """Records of the refused letters turned out done: the policy tries again."""
        if self.unwritable_in & done:
            self.unwritable, self.unwritable_in = "", frozenset()

    def exhausted(self, now: float, piece: bool = False) -> bool:
        """The head batch has used up its retries (count or time); a piece of a bisected
        batch (`piece`) has one attempt."""
        if self.since is None:
            return False
        if piece:
            return True
        limit = self.policy.retry_for_seconds
        return self.count > self.policy.retries or (limit is not None and now - self.since >= limit)

    def records_too_old(self, records: Sequence[Record], wall: float) -> int:
        """How many of the first `records` arrived more than maxRecordAgeSeconds before
        `wall` (arrivals grow along a shard, so they lead; block passes nothing over, and
        a record without an arrival time is never old)."""
        limit = self.policy.max_record_age_seconds
        if limit is None or self.policy.then is AfterRetries.BLOCK:
            return 0
        count = 0
        for record in records:
            arrived = record.approximate_arrival_timestamp
            if arrived is None or wall - arrived.timestamp() < limit:
                break
            count += 1
        return count

    def too_old_error(self) -> str:
        limit = self.policy.max_record_age_seconds
        assert limit is not None
        return f"{self.error} (older than maxRecordAgeSeconds {limit:g}: not retried)"

    def hung(self, started: float | None, now: float) -> bool:
        """Has a call begun at `started` run past the policy's timeout?"""
        return started is not None and now - started >= self.policy.timeout_seconds

    def failing(self, now: float) -> Failing | None:
        """The head call's failures, for the heartbeat; None when it is not failing."""
        if self.since is None:
            return None
        error = self.error
        if self.unwritable:  # the reason first: it names the record
            error = f"{self.unwritable}; the processor raised {error}"
        return Failing(
            attempts=self.count,
            seconds=now - self.since,
            error=error,
            blocked=bool(self.unwritable)
            or (self.exhausted(now) and self.policy.then is AfterRetries.BLOCK),
        )
