"""Leader election over a compare-and-swap record (a coordination.k8s.io/v1 Lease), as a
pure state machine: the driver reads the record, feeds it in, does what `next_action`
says and reports the outcome. Time is the caller's monotonic clock; wall-clock times in
the record are informational only, so clock skew between replicas does not matter.

Why two replicas never both lead (given clocks that tick at about the same rate):
- a leader counts its term from the moment it *sent* its last successful renewal and
  stops leading `renew_deadline` later;
- a candidate counts from the moment it first *saw* that renewal (necessarily after it
  was sent) and may take over only `lease_seconds` later, which is longer.
So the old leader has stopped, by its own clock, before anyone else can win the swap."""

from __future__ import annotations

import enum
from dataclasses import dataclass


@dataclass(frozen=True)
class ElectionTiming:
    lease_seconds: float = 15.0
    renew_deadline_seconds: float = 10.0
    retry_seconds: float = 2.0

    def __post_init__(self) -> None:
        if not 0 < self.retry_seconds < self.renew_deadline_seconds < self.lease_seconds:
            raise ValueError(
                "leader election needs 0 < retry < renew deadline < lease duration, got "
                f"{self.retry_seconds} / {self.renew_deadline_seconds} / {self.lease_seconds}"
            )


@dataclass(frozen=True)
class LeaseRecord:
    """What the lock holds. `version` changes with every write (resourceVersion)."""

    holder: str | None
    lease_seconds: float
    transitions: int
    version: str


class Act(enum.Enum):
    CREATE = "create"  # no record yet
    ACQUIRE = "acquire"  # free or expired: swap ourselves in
    RENEW = "renew"  # ours: swap in a fresh renewal
    WAIT = "wait"  # someone else leads


@dataclass(frozen=True)
class Action:
    act: Act
    # For CREATE/ACQUIRE/RENEW: the record version the swap must replace ("" for CREATE),
    # and the transition count to write.
    expected_version: str = ""
    transitions: int = 0


class Election:
    def __init__(self, identity: str, timing: ElectionTiming, now: float) -> None:
        self.identity = identity
        self.timing = timing
        self._record: LeaseRecord | None = None
        self._observed_at = now  # when the current record version was first seen
        self._renewed_at: float | None = None  # when our last successful swap was sent
        self._known = False

    # --- inputs
    def observe(self, record: LeaseRecord | None, now: float) -> None:
        changed = not self._known or _version(record) != _version(self._record)
        self._known = True
        if changed:
            self._record = record
            self._observed_at = now
        if self._renewed_at is not None and (record is None or record.holder != self.identity):
            self._renewed_at = None  # someone else holds it: we lead no more

    def swapped(self, action: Action, record: LeaseRecord, sent_at: float) -> None:
        """The swap of `action`, sent at `sent_at`, succeeded and wrote `record`."""
        self._record = record
        self._observed_at = sent_at
        self._renewed_at = sent_at

    def swap_failed(self, action: Action) -> None:
        """A conflict or an error: the record must be read again before acting."""
        self._known = False

    def resigned(self) -> None:
        self._renewed_at = None

    # --- outputs
    def leading(self, now: float) -> bool:
        return (
            self._renewed_at is not None
            and now - self._renewed_at < self.timing.renew_deadline_seconds
        )

    def term_left(self, now: float) -> float:
        if self._renewed_at is None:
            return 0.0
        return max(0.0, self._renewed_at + self.timing.renew_deadline_seconds - now)

    def lost(self, now: float) -> bool:
        """We led and our term ran out without a renewal."""
        return self._renewed_at is not None and not self.leading(now)

    def next_action(self, now: float) -> Action:
        if not self._known:
            raise RuntimeError("observe the record before acting")
        record = self._record
        if record is None:
            return Action(Act.CREATE)
        if record.holder == self.identity:
            if self._renewed_at is None:  # ours from an earlier life: take it as new
                return Action(Act.ACQUIRE, record.version, record.transitions)
            return Action(Act.RENEW, record.version, record.transitions)
        if not record.holder or now - self._observed_at >= record.lease_seconds:
            return Action(Act.ACQUIRE, record.version, record.transitions + 1)
        return Action(Act.WAIT)

    def wait_seconds(self, now: float) -> float:
        """How long the driver may sleep before the next read."""
        record = self._record
        if self._renewed_at is not None:
            return self.timing.retry_seconds
        if record is not None and record.holder and record.holder != self.identity:
            expires = self._observed_at + record.lease_seconds - now
            return max(0.0, min(self.timing.retry_seconds, expires))
        return self.timing.retry_seconds


def _version(record: LeaseRecord | None) -> str | None:
    return None if record is None else record.version
