"""Leader election over a compare-and-swap record (a coordination.k8s.io/v1 Lease), as a
pure state machine: the driver reads the record, feeds it in, does what `next_action`
says and reports the outcome. Time is the caller's monotonic clock; wall-clock times in
the record are informational only, so clock skew between replicas does not matter.

Why two replicas never both lead (given clocks that tick at about the same rate):
- a leader counts its term from the moment it *sent* its last successful renewal and
  stops leading `renew_deadline` later;
- a candidate counts from the moment it first *saw* that renewal (necessarily after it
  was sent) and may take over only `lease_seconds` later, which is longer.
So the old leader has stopped, by its own clock, before anyone else can win the swap.

A term ends once, for good (docs/design.md#operator-lifecycle): after a lapse, another holder
seen, the record deleted or a resignation, `leading` stays false even if a late renewal
answer comes back. The process then exits and returns as a standby; a replica that
could flip back to leading would run no consumer (kopf never restarts a daemon that
returned) while answering workers as the leader.

Each acquisition writes a transition count one higher than the record's, so the count
is a term number: unique per acquisition and growing (the record is compare-and-swap)."""

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
        self._term: int | None = None  # the transition count we acquired with
        self._ended = False  # we led, and no longer do: terminal

    # --- inputs
    def observe(self, record: LeaseRecord | None, now: float) -> None:
        changed = not self._known or _version(record) != _version(self._record)
        self._known = True
        if changed:
            self._record = record
            self._observed_at = now
        if self._term is not None and (record is None or record.holder != self.identity):
            self._ended = True  # someone else holds it, or nobody: our term is over

    def swapped(self, action: Action, record: LeaseRecord, sent_at: float, now: float) -> None:
        """The swap of `action`, sent at `sent_at`, succeeded (we learnt it at `now`)
        and wrote `record`."""
        self._record = record
        self._observed_at = sent_at
        if self._ended:
            return
        if self._term is None:
            if now - sent_at < self.timing.renew_deadline_seconds:
                self._term = record.transitions
                self._renewed_at = sent_at
            # else: won too late to lead at all; the next round acquires afresh
            return
        if not self._end_if_lapsed(now):
            self._renewed_at = sent_at

    def _end_if_lapsed(self, now: float) -> bool:
        """Whether the term is over, ending it if its renew deadline has passed: in a
        lapse we did not lead, and whatever stopped for that stays stopped (a renewal
        answered after the deadline does not resume it)."""
        if self._term is not None and not self._within_term(now):
            self._ended = True
        return self._ended

    def swap_failed(self, action: Action) -> None:
        """A conflict or an error: the record must be read again before acting."""
        self._known = False

    def resigned(self) -> None:
        if self._term is not None:
            self._ended = True

    # --- outputs
    def leading(self, now: float) -> bool:
        return not self._ended and self._term is not None and self._within_term(now)

    def _within_term(self, now: float) -> bool:
        return (
            self._renewed_at is not None
            and now - self._renewed_at < self.timing.renew_deadline_seconds
        )

    @property
    def term(self) -> int | None:
        """The term we lead (or led) in: the transition count of our acquisition."""
        return self._term

    def term_left(self, now: float) -> float:
        if not self.leading(now) or self._renewed_at is None:
            return 0.0
        return max(0.0, self._renewed_at + self.timing.renew_deadline_seconds - now)

    def lost(self, now: float) -> bool:
        """We led and lead no more (lapsed, deposed or resigned): terminal."""
        return self._term is not None and not self.leading(now)

    def next_action(self, now: float) -> Action:
        if not self._known:
            raise RuntimeError("observe the record before acting")
        if self._end_if_lapsed(now):  # no renewal may be sent for a term that is over
            return Action(Act.WAIT)  # a term is never resumed: exit, come back a standby
        record = self._record
        if record is None:
            return Action(Act.CREATE)
        if record.holder == self.identity:
            if self._term is None:  # ours from an earlier life: a new term all the same
                return Action(Act.ACQUIRE, record.version, record.transitions + 1)
            return Action(Act.RENEW, record.version, record.transitions)
        # The holder's recorded duration, but never less than ours: the record holds
        # whole seconds, and a holder's renew deadline must end before we may take over.
        wait = max(record.lease_seconds, self.timing.lease_seconds)
        if not record.holder or now - self._observed_at >= wait:
            return Action(Act.ACQUIRE, record.version, record.transitions + 1)
        return Action(Act.WAIT)

    def wait_seconds(self, now: float) -> float:
        """How long the driver may sleep before the next read."""
        record = self._record
        if self._term is not None:
            return self.timing.retry_seconds
        if record is not None and record.holder and record.holder != self.identity:
            wait = max(record.lease_seconds, self.timing.lease_seconds)
            expires = self._observed_at + wait - now
            return max(0.0, min(self.timing.retry_seconds, expires))
        return self.timing.retry_seconds


def _version(record: LeaseRecord | None) -> str | None:
    return None if record is None else record.version
