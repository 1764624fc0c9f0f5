"""In-memory dead-letter targets for unit tests: each refuses what its service would
(a letter over its limit), so a writer that does not check sizes first fails as it
would against the real service: every time."""

from __future__ import annotations

from streamconsumer.deadletter.base import FailedBatch, Letter


class Refused(Exception):
    """As SQS's InvalidParameterValue or Kinesis' ValidationException."""


class StubTarget:
    def __init__(self, name: str, limit: int) -> None:
        self.name = name
        self._limit = limit
        self.sent: list[Letter] = []
        self.requests = 0

    def limit(self) -> int:
        return self._limit

    def size(self, letter: Letter) -> int:
        return len(letter.body)

    def send(self, batch: FailedBatch, letters: list[Letter]) -> None:
        for letter in letters:
            if self.size(letter) > self._limit:
                raise Refused(f"message must be shorter than {self._limit} bytes")
        self.requests += 1
        self.sent += letters
