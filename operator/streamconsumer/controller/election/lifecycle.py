"""When this replica leads, and what runs then (docs/design.md#operator-lifecycle), as a
sans-I/O machine: the process entry point and the simulation feed it the election's
view and what the consumers report, and act on its phase.

    standby --elected--> leading --term over | deposed | asked to stop--> ended

`ended` is terminal: the process exits (1 when leadership was lost, so its pod brings it
back as a standby; 0 when asked to stop). A replica never goes back to leading in the
same process: kopf never restarts a daemon that returned, so a second term would run no
consumer while answering workers as the leader."""

from __future__ import annotations

import enum


class Phase(enum.Enum):
    STANDBY = "standby"  # serves 503, campaigns
    LEADING = "leading"  # kopf runs; consumers are loaded, fenced and driven
    ENDED = "ended"  # terminal: exit


class Lifecycle:
    def __init__(self) -> None:
        self.phase = Phase.STANDBY
        self.reason: str | None = None
        self.exit_code = 0

    @property
    def leading(self) -> bool:
        """May consumers run and the worker API answer from them?"""
        return self.phase is Phase.LEADING

    def observe(self, leading: bool, lost: bool) -> Phase:
        """The election's view now (`lost`: we led and lead no more); returns the phase."""
        if self.phase is not Phase.ENDED and lost:
            # From standby too: a term won and lost before anyone acted on it.
            self._end("the term is over", 1)
        elif self.phase is Phase.STANDBY and leading:
            self.phase = Phase.LEADING
        return self.phase

    def deposed(self, reason: str) -> None:
        """A newer term fenced a consumer's status: ours is over whatever the Lease says."""
        self._end(reason, 1)

    def stop(self) -> None:
        """Asked to stop (SIGTERM): a standby just exits, a leader hands over first."""
        self._end("asked to stop", 0)

    def _end(self, reason: str, code: int) -> None:
        if self.phase is not Phase.ENDED:
            self.phase, self.reason, self.exit_code = Phase.ENDED, reason, code
