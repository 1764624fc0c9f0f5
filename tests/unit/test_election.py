"""Leader election (core/election.py): the rules one by one, then a simulation of several
replicas against one compare-and-swap record, with slow and lost requests, crashes and
restarts in any order: never two leaders at the same moment."""

from __future__ import annotations

from dataclasses import dataclass

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from streamconsumer.core.election import (
    Act,
    Action,
    Election,
    ElectionTiming,
    LeaseRecord,
)

TIMING = ElectionTiming(lease_seconds=15, renew_deadline_seconds=10, retry_seconds=2)


def record(holder: str | None, version: str, transitions: int = 0) -> LeaseRecord:
    return LeaseRecord(holder, 15.0, transitions, version)


def test_no_record_means_create_then_lead() -> None:
    election = Election("a", TIMING, now=0)
    election.observe(None, 0)
    action = election.next_action(0)
    assert action.act is Act.CREATE
    election.swapped(action, record("a", "1"), sent_at=0, now=0)
    assert election.leading(9.9)
    assert not election.leading(10)
    assert election.lost(10)


def test_a_held_lease_is_taken_only_a_whole_duration_after_it_was_last_seen_changing() -> None:
    election = Election("b", TIMING, now=0)
    election.observe(record("a", "1"), 0)
    assert election.next_action(14.9).act is Act.WAIT
    election.observe(record("a", "2"), 5)  # renewed: the count starts again
    assert election.next_action(19.9).act is Act.WAIT
    election.observe(record("a", "2"), 19.9)
    action = election.next_action(20)
    assert action == Action(Act.ACQUIRE, "2", 1)


def test_a_freed_lease_is_taken_at_once() -> None:
    election = Election("b", TIMING, now=0)
    election.observe(record(None, "7", transitions=3), 0)
    assert election.next_action(0) == Action(Act.ACQUIRE, "7", 4)


def test_the_term_counts_from_when_the_renewal_was_sent() -> None:
    election = Election("a", TIMING, now=0)
    election.observe(record("a", "1"), 0)
    action = election.next_action(0)
    assert action.act is Act.ACQUIRE  # ours from an earlier life of this pod
    election.swapped(action, record("a", "2"), sent_at=3, now=4)  # answered later
    assert election.term_left(4) == pytest.approx(9)
    assert not election.leading(13)


def test_seeing_another_holder_ends_the_term() -> None:
    election = Election("a", TIMING, now=0)
    election.observe(None, 0)
    election.swapped(election.next_action(0), record("a", "1"), sent_at=0, now=0)
    election.observe(record("b", "2", 1), 1)
    assert not election.leading(1)
    assert election.lost(1)


def test_a_deposed_leader_stays_deposed() -> None:
    """Issue 22.2: once another holder (or no record) is seen, the term is over for good:
    `lost` stays true, so the process exits instead of running on with no consumers."""
    election = Election("a", TIMING, now=0)
    election.observe(None, 0)
    election.swapped(election.next_action(0), record("a", "1"), sent_at=0, now=0)
    election.observe(record("b", "2", 1), 3)
    assert election.lost(3)
    election.observe(record("b", "3", 1), 5)
    assert election.lost(5)
    assert election.lost(60)
    election.observe(None, 61)  # deleted: still not ours to take without a new life
    assert election.next_action(61).act is Act.WAIT
    assert election.lost(61)


def test_a_renewal_answered_after_the_deadline_ends_the_term() -> None:
    """Issue 22.3: between the deadline and the late answer this replica did not lead
    (its consumer loops stopped); the late success must not make it lead again."""
    election = Election("a", TIMING, now=0)
    election.observe(None, 0)
    election.swapped(election.next_action(0), record("a", "1"), sent_at=0, now=0)
    election.observe(record("a", "1"), 9)
    renew = election.next_action(9)
    assert renew.act is Act.RENEW
    assert not election.leading(10.5)  # the loops see the lapse here
    election.swapped(renew, record("a", "2"), sent_at=9, now=10.5)
    assert not election.leading(10.6)
    assert election.lost(10.6)


def test_each_acquisition_is_a_new_higher_term() -> None:
    election = Election("a", TIMING, now=0)
    election.observe(record("a", "5", transitions=4), 0)  # ours from an earlier life
    action = election.next_action(0)
    assert action == Action(Act.ACQUIRE, "5", 5)
    election.swapped(action, record("a", "6", transitions=5), sent_at=0, now=0)
    assert election.term == 5


def test_an_acquisition_answered_too_late_is_not_a_term() -> None:
    election = Election("a", TIMING, now=0)
    election.observe(None, 0)
    election.swapped(election.next_action(0), record("a", "1"), sent_at=0, now=11)
    assert not election.leading(11)
    assert not election.lost(11)  # it never led: it simply tries again
    election.observe(record("a", "1"), 11)
    assert election.next_action(11) == Action(Act.ACQUIRE, "1", 1)


def test_bad_timing_is_refused_with_its_reason() -> None:
    with pytest.raises(ValueError, match="retry < renew deadline < lease duration"):
        ElectionTiming(lease_seconds=10, renew_deadline_seconds=10, retry_seconds=2)


# --- the simulation ---------------------------------------------------------------------


@dataclass
class Swap:
    action: Action
    sent_at: float
    applied: LeaseRecord | None = None  # set once the store took it
    refused: bool = False


@dataclass
class Store:
    record: LeaseRecord | None = None
    versions: int = 0

    def apply(self, swap: Swap, holder: str) -> None:
        current = None if self.record is None else self.record.version
        if current != (swap.action.expected_version or None):
            swap.refused = True
            return
        self.versions += 1
        self.record = LeaseRecord(
            holder, TIMING.lease_seconds, swap.action.transitions, str(self.versions)
        )
        swap.applied = self.record


@dataclass
class Term:
    """A span over which a replica believed it led."""

    identity: str
    since: float
    until: float


@dataclass
class Replica:
    """One operator's Elector loop: read, decide, send a swap, the store applies it, the
    answer comes back; then again. Each simulated step moves one replica one stage on."""

    identity: str
    election: Election
    stage: str = "read"
    swap: Swap | None = None

    def step(
        self,
        store: Store,
        now: float,
        fault: str | None,
        late: list[tuple[Swap, str]],
        terms: list[Term],
    ) -> None:
        if self.stage == "read":
            self.election.observe(store.record, now)
            action = self.election.next_action(now)
            if action.act is not Act.WAIT:
                self.swap, self.stage = Swap(action, sent_at=now), "apply"
        elif self.stage == "apply" and self.swap is not None:
            if fault == "delay":  # the request lingers in the network and lands later
                late.append((self.swap, self.identity))
            elif fault != "drop":
                store.apply(self.swap, self.identity)
            self.stage = "reply"
        elif self.stage == "reply" and self.swap is not None:
            swap, self.swap, self.stage = self.swap, None, "read"
            if swap.applied is not None and fault != "drop":
                self.election.swapped(swap.action, swap.applied, swap.sent_at, now)
                if self.election.leading(now):
                    # From now on this replica believes it leads over this whole span.
                    deadline = swap.sent_at + TIMING.renew_deadline_seconds
                    terms.append(Term(self.identity, swap.sent_at, deadline))
            else:  # refused, or no answer: did it land? read again to know
                self.election.swap_failed(swap.action)


STEP = st.tuples(
    st.sampled_from([0, 1] * 4 + [2]),  # which replica moves (a third one now and then)
    st.sampled_from([0.0, 0.0, 0.25, 0.5, 1.0, 2.0]),  # time passing before the step
    # faults: a request or answer lost, a request landing late, a crash, or the replica
    # frozen (GC pause, partition) for a while: the others go on without it
    st.sampled_from(
        [None] * 12 + ["drop", "delay", "crash", "land-late", "freeze:5", "freeze:9.5", "freeze:16"]
    ),
)


# Random schedules rarely hit the one-second margins between the deadlines; these pin them.
# The leader renews at 0 and freezes; the standby saw that renewal at once and reads on.
FROZEN_LEADER = [(0, 0.0, None)] * 3 + [(1, 0.0, None), (0, 0.0, "freeze:16")]
TAKEOVER_AT_9_5 = FROZEN_LEADER + [(1, 0.5, None)] * 19 + [(1, 0.0, None)] * 2
# The renewal is answered 3 s after it was sent: the leader's term ends at 10, not 13.
SLOW_ANSWER = (
    [(0, 0.0, None), (0, 0.0, None), (0, 3.0, None), (0, 0.0, "freeze:16")]
    + [(1, 0.0, None)]
    + [(1, 1.0, None)] * 15
    + [(1, 0.0, None)] * 2
)


@settings(max_examples=2000, deadline=None)
@given(st.lists(STEP, max_size=60))
@example(TAKEOVER_AT_9_5)
@example(SLOW_ANSWER)
def test_never_two_leaders_at_once(steps: list[tuple[int, float, str | None]]) -> None:
    now = 0.0
    store = Store()
    replicas = [Replica(name, Election(name, TIMING, now)) for name in "abc"]
    frozen_until = [0.0, 0.0, 0.0]
    late: list[tuple[Swap, str]] = []  # requests still in the network
    terms: list[Term] = []
    for index, elapsed, fault in steps:
        now += elapsed
        if now < frozen_until[index]:
            continue
        if fault is not None and fault.startswith("freeze:"):
            frozen_until[index] = now + float(fault.split(":")[1])
        elif fault == "crash":  # a new process, same pod name; its last request may land
            dying = replicas[index]
            if dying.swap is not None:
                late.append((dying.swap, dying.identity))
            for term in terms:  # the dead believe nothing
                if term.identity == replicas[index].identity:
                    term.until = min(term.until, now)
            replicas[index] = Replica(replicas[index].identity, Election("abc"[index], TIMING, now))
        elif fault == "land-late" and late:
            swap, holder = late.pop(0)
            if swap.applied is None and not swap.refused:
                store.apply(swap, holder)
        else:
            replicas[index].step(store, now, fault, late, terms)
        leaders = [r.identity for r in replicas if r.election.leading(now)]
        assert len(leaders) <= 1, f"two leaders at t={now}: {leaders}"
        if leaders:
            assert store.record is not None
            assert store.record.holder == leaders[0]
    # Stronger than sampling the moments of the steps: no two replicas' beliefs overlap.
    for mine in terms:
        for other in terms:
            if mine.identity != other.identity:
                assert mine.until <= other.since or other.until <= mine.since, (mine, other)


def test_a_standby_takes_over_after_the_leader_dies() -> None:
    store = Store()
    a, b = Election("a", TIMING, 0), Election("b", TIMING, 0)
    a.observe(store.record, 0)
    swap = Swap(a.next_action(0), 0)
    store.apply(swap, "a")
    assert swap.applied is not None
    a.swapped(swap.action, swap.applied, 0, 0)
    now = 0.0
    while not b.leading(now):  # the leader is gone: b reads every 2 s
        now += TIMING.retry_seconds
        b.observe(store.record, now)
        action = b.next_action(now)
        if action.act is not Act.WAIT:
            swap = Swap(action, now)
            store.apply(swap, "b")
            assert swap.applied is not None
            b.swapped(action, swap.applied, now, now)
    assert 15 < now <= 15 + 2 * TIMING.retry_seconds  # first read at 2 s, then every 2 s
    assert store.record is not None
    assert store.record.transitions == 1


def test_a_standby_waits_at_least_its_own_lease_whatever_the_record_says() -> None:
    """Adversarial review: the Lease holds whole seconds (10.5 was written as 10), and a
    standby trusting the record took over at 10 while the holder led until 10.4."""
    timing = ElectionTiming(lease_seconds=10.5, renew_deadline_seconds=10.4, retry_seconds=2)
    standby = Election("b", timing, now=0)
    standby.observe(LeaseRecord("a", 10.0, 0, "1"), 0)
    assert standby.next_action(10.0).act is Act.WAIT
    assert standby.next_action(10.5).act is Act.ACQUIRE


def test_no_renewal_is_sent_once_the_term_has_lapsed() -> None:
    """Adversarial review: a read answered after the lapse led to one more renewal."""
    election = Election("a", TIMING, now=0)
    election.observe(None, 0)
    election.swapped(election.next_action(0), record("a", "1"), sent_at=0, now=0)
    election.observe(record("a", "1"), 10.5)
    assert election.next_action(10.5).act is Act.WAIT
    assert election.lost(10.5)


def test_a_term_won_and_lost_before_anyone_acted_ends_the_standby() -> None:
    """Adversarial review: the process froze between winning and looking; it then
    waited for leadership for ever, neither leading nor exiting."""
    from streamconsumer.controller.election.lifecycle import Lifecycle, Phase

    lifecycle = Lifecycle()
    assert lifecycle.observe(leading=False, lost=True) is Phase.ENDED
    assert lifecycle.exit_code == 1
