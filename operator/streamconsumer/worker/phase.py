"""Where a held shard is in its life (`ShardMachine`): one explicit phase, and the table
of the moves between phases. The machine checks each move against the table, so a step
can never, say, start a shard it has let go or end one twice."""

from __future__ import annotations

from enum import Enum


class Phase(Enum):
    STARTING = "starting"  # initialize() has not returned yet
    PROCESSING = "processing"  # initialized: batches delivered, checkpoints sent
    ENDING = "ending"  # shard_ended() returned: SHARD_END to store
    SHUT_DOWN = "shut down"  # shutdown_requested() returned or raised: the release to store
    ENDED = "ended"  # read to the end, SHARD_END stored
    RELEASED = "released"  # handed off with its position
    LOST = "lost"  # taken away; nothing stored


FINISHED = frozenset({Phase.ENDED, Phase.RELEASED, Phase.LOST})

# The moves a phase may make. A shard lost before it started never calls lease_lost();
# a shard handed off before it started sends its release at once (STARTING -> RELEASED);
# a hand-off may come after shard_ended() returned, before its SHARD_END went out; and a
# SHARD_END the operator refuses becomes a release at the last record done.
TRANSITIONS: dict[Phase, frozenset[Phase]] = {
    Phase.STARTING: frozenset({Phase.PROCESSING, Phase.RELEASED, Phase.LOST}),
    Phase.PROCESSING: frozenset({Phase.ENDING, Phase.SHUT_DOWN, Phase.LOST}),
    Phase.ENDING: frozenset({Phase.SHUT_DOWN, Phase.ENDED, Phase.RELEASED, Phase.LOST}),
    Phase.SHUT_DOWN: frozenset({Phase.RELEASED, Phase.ENDED, Phase.LOST}),
    Phase.ENDED: frozenset(),
    Phase.RELEASED: frozenset(),
    Phase.LOST: frozenset(),
}
