"""Enhanced fan-out: a shard reader fed by SubscribeToShard (boto3's event stream) instead
of GetRecords, behind the same `ShardReader` interface, so ShardMachine and the processor
API do not change.

One subscription thread per shard (the pump) subscribes, puts each event on a short queue
and subscribes again from the last event's ContinuationSequenceNumber before Kinesis ends
the subscription at 5 minutes (`resubscribe_seconds`); the shard's reader thread takes
events off the queue in `read()`. The queue holds an ordered prefix of the shard, so the
next subscription always continues after the last event queued: nothing skipped, nothing
twice. The shard ends where the polling reader ends it: the event without a continuation
carries the children (ChildShards), and `read()` signals shard end exactly as
`KinesisShardReader` does.

ResourceInUseException (a subscription for this consumer and shard is still open, e.g.
the previous owner's, or one made in the last 5 seconds) and LimitExceededException are
waited out with jittered back-off; other errors reach `read()`'s caller, which pauses the
shard and reads again (the pump then starts over from where it stopped)."""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from botocore.exceptions import ClientError

from streamconsumer.core.backoff import Backoff
from streamconsumer.core.lineage import Shard
from streamconsumer.models.api import StartPosition, StartPositionType
from streamconsumer.sources.aws import aws_error
from streamconsumer.sources.base import ReadResult
from streamconsumer.sources.kinesis_polling import (
    KinesisSource,
    StreamRef,
    in_the_future,
    shard_iterator,
    user_records,
)

if TYPE_CHECKING:
    from mypy_boto3_kinesis import KinesisClient
    from mypy_boto3_kinesis.type_defs import (
        StartingPositionTypeDef,
        SubscribeToShardEventTypeDef,
    )

log = logging.getLogger(__name__)

# Kinesis ends every subscription after 5 minutes; renewing a little before keeps records
# flowing without a gap (KCL renews on the end; we do not wait for it).
RESUBSCRIBE_SECONDS = 280.0
# read() returns, empty if need be, at least this often, so the shard's reader thread sees
# its shard's fate (lost, handed off) promptly.
EVENT_WAIT_SECONDS = 1.0
QUEUED_EVENTS = 4  # events read ahead of the processor (each up to 10,000 records / 10 MB)
RETRIED_CODES = frozenset({"ResourceInUseException", "LimitExceededException"})
NOT_FOUND = "ResourceNotFoundException"  # no such consumer (any more), stream or shard


def starting_position(start: StartPosition, continuation: str | None) -> StartingPositionTypeDef:
    """SubscribeToShard's StartingPosition: the assignment's start (as the polling reader
    resolves it) until an event has named a continuation, then right after that."""
    if continuation is not None:
        return {"Type": "AFTER_SEQUENCE_NUMBER", "SequenceNumber": continuation}
    position: StartingPositionTypeDef = {"Type": start.type.value}
    if start.sequence_number is not None:
        position["SequenceNumber"] = start.sequence_number
    if start.timestamp is not None:
        position["Timestamp"] = start.timestamp
    return position


def as_start(position: StartingPositionTypeDef) -> StartPosition:
    """The same position for GetShardIterator (the end-of-shard probe)."""
    return StartPosition(
        type=StartPositionType(position["Type"]),
        sequence_number=position.get("SequenceNumber"),
        timestamp=position.get("Timestamp"),
    )


def resubscribe_due(subscribed_at: float, now: float, interval: float) -> bool:
    return now - subscribed_at >= interval


def retried(error: ClientError) -> bool:
    """Errors that go away by waiting: another subscription still open, or limits."""
    return aws_error(error).code in RETRIED_CODES


@dataclass(frozen=True, slots=True)
class End:
    """The shard is closed and read to its end."""

    children: tuple[str, ...]


def shard_end(event: SubscribeToShardEventTypeDef) -> End | None:
    """At shard end Kinesis sends the last event without a ContinuationSequenceNumber,
    with the children (none when they have left the stream too)."""
    if event.get("ContinuationSequenceNumber"):
        return None
    return End(tuple(child["ShardId"] for child in event.get("ChildShards", [])))


@dataclass
class ReadSide:
    """What `read()` makes of the events, in order (pure): batches of user records, and
    after the end, the end again."""

    previous: str | None  # last complete record's sequence (KPL aggregates resume there)
    ended: ReadResult | None = None
    millis_behind: int | None = None

    def event(self, event: SubscribeToShardEventTypeDef) -> ReadResult:
        records = list(user_records(event["Records"], self.previous))
        if records:
            self.previous = records[-1].sequence_number
        self.millis_behind = event.get("MillisBehindLatest")
        end = shard_end(event)
        if end is None:
            return ReadResult(records, self.millis_behind, at_tip=self.millis_behind == 0)
        self.ended = ReadResult([], 0, shard_end=True, child_shards=end.children)
        return ReadResult(records, 0, shard_end=True, child_shards=end.children)

    def end(self, end: End) -> ReadResult:
        self.ended = ReadResult([], 0, shard_end=True, child_shards=end.children)
        return self.ended

    def idle(self) -> ReadResult:
        """No event within the wait: the lag as last said, and nothing of the tip."""
        return ReadResult([], self.millis_behind)


@dataclass
class Pump:
    """The subscription side, run by one thread per shard; its state (the continuation)
    belongs to that thread alone."""

    client: KinesisClient
    stream: StreamRef
    consumer_arn: Callable[[], str]
    shard_id: str
    start: StartPosition
    events: queue.Queue[SubscribeToShardEventTypeDef | End | Exception]
    resubscribe_seconds: float
    stopping: threading.Event = field(default_factory=threading.Event)
    continuation: str | None = None
    subscriptions: int = 0  # how many SubscribeToShard calls succeeded
    forget_arn: Callable[[], None] = lambda: None  # a consumer registered anew has a new ARN
    backoff: Backoff = field(default_factory=lambda: Backoff(base=0.5, cap=10.0))
    _current: Any = None  # the open event stream, closed to stop

    def run(self) -> None:
        failures = 0
        try:
            while not self.stopping.is_set():
                try:
                    outcome = self._subscription()
                except ClientError as error:
                    if not retried(error):
                        if aws_error(error).code == NOT_FOUND:
                            self.forget_arn()
                        raise
                    log.info("%s: subscription waits: %s", self.shard_id, error)
                    self.stopping.wait(self.backoff.delay(failures))
                    failures += 1
                    continue
                failures = 0
                if outcome is not None:
                    self._put(outcome)
                    return
        except Exception as error:  # read() raises it; the next read() starts over
            if not self.stopping.is_set():
                self._put(error)

    def stop(self) -> None:
        self.stopping.set()
        current = self._current
        if current is not None:
            current.close()

    def _subscription(self) -> End | None:
        """One subscription, until renewal time or the stream's end (None), or shard end:
        the End to queue after the events (None when the last event said so itself)."""
        position = starting_position(self.start, self.continuation)
        response = self._subscribe(position)
        self._current = response["EventStream"]
        subscribed_at = time.monotonic()
        moved = held = False
        try:
            for message in self._current:  # an exception message raises here
                event = message.get("SubscribeToShardEvent")
                if event is None:
                    continue
                if not held:  # the first event: the subscription holds
                    held = True
                    self.subscriptions += 1
                    log.info("%s: subscribed at %s", self.shard_id, position)
                moved = moved or bool(event["Records"])
                self._put(event)
                if shard_end(event) is not None:
                    self.stopping.set()  # read() ends the shard on that event
                    return None
                self.continuation = event["ContinuationSequenceNumber"]
                if self.stopping.is_set() or resubscribe_due(
                    subscribed_at, time.monotonic(), self.resubscribe_seconds
                ):
                    break
        finally:
            self._current.close()
            self._current = None
        if moved or self.stopping.is_set():
            return None
        return self._ended_quietly()

    def _subscribe(self, position: StartingPositionTypeDef) -> Any:
        arn = self.consumer_arn()
        try:
            return self.client.subscribe_to_shard(
                ConsumerARN=arn, ShardId=self.shard_id, StartingPosition=position
            )
        except ClientError as error:
            if not in_the_future(error, as_start(position)):
                raise
        # Kinesis' clock is behind ours: nothing is at or after the timestamp yet.
        return self.client.subscribe_to_shard(
            ConsumerARN=arn,
            ShardId=self.shard_id,
            StartingPosition={"Type": StartPositionType.LATEST.value},
        )

    def _ended_quietly(self) -> End | None:
        """After a subscription that brought no records: is the shard closed and read to
        its end? Real Kinesis says so in an event (ChildShards); kinesis-local never does
        (docs/emulators.md), so one GetRecords at the continuation asks, as often as we
        renew an idle subscription (every few minutes)."""
        position = as_start(starting_position(self.start, self.continuation))
        iterator = shard_iterator(self.client, self.stream, self.shard_id, position)
        response = self.client.get_records(ShardIterator=iterator, Limit=1)
        if response["Records"] or response.get("NextShardIterator"):
            return None
        return End(tuple(child["ShardId"] for child in response.get("ChildShards", [])))

    def _put(self, item: SubscribeToShardEventTypeDef | End | Exception) -> None:
        while not self.stopping.is_set():
            try:
                self.events.put(item, timeout=EVENT_WAIT_SECONDS)
                return
            except queue.Full:
                continue


class FanOutShardReader:
    """A shard's records through SubscribeToShard; `close()` ends the subscription."""

    def __init__(
        self,
        client: KinesisClient,
        stream: StreamRef,
        consumer_arn: Callable[[], str],
        shard_id: str,
        start: StartPosition,
        resubscribe_seconds: float = RESUBSCRIBE_SECONDS,
        forget_arn: Callable[[], None] = lambda: None,
    ) -> None:
        self.shard_id = shard_id
        self._reading = ReadSide(previous=start.sequence_number)
        self._events: queue.Queue[SubscribeToShardEventTypeDef | End | Exception] = queue.Queue(
            QUEUED_EVENTS
        )
        self._pump = Pump(
            client,
            stream,
            consumer_arn,
            shard_id,
            start,
            self._events,
            resubscribe_seconds,
            forget_arn=forget_arn,
        )
        self._thread: threading.Thread | None = None

    def read(self) -> ReadResult:
        """The next event's records (empty after EVENT_WAIT_SECONDS without one); after
        shard end, shard end again. Raises what the subscription could not wait away."""
        if self._reading.ended is not None:
            return self._reading.ended
        if self._thread is None or (not self._thread.is_alive() and self._events.empty()):
            self._thread = threading.Thread(
                target=self._pump.run, name=f"subscribe-{self.shard_id}", daemon=True
            )
            self._thread.start()
        try:
            item = self._events.get(timeout=EVENT_WAIT_SECONDS)
        except queue.Empty:
            return self._reading.idle()
        if isinstance(item, Exception):
            self._thread.join()  # it ends after an error: the next read() starts over
            raise item
        if isinstance(item, End):
            return self._reading.end(item)
        return self._reading.event(item)

    @property
    def subscriptions(self) -> int:
        return self._pump.subscriptions

    def close(self) -> None:
        self._pump.stop()


class ConsumerArn:
    """The registered consumer's ARN, looked up once it is needed (the operator registers
    it; until it is ACTIVE, subscribing fails and the shard retries)."""

    def __init__(self, client: KinesisClient, stream: StreamRef, consumer_name: str) -> None:
        self._client = client
        self._stream = stream
        self._name = consumer_name
        self._arn: str | None = None
        self._lock = threading.Lock()

    def __call__(self) -> str:
        with self._lock:
            if self._arn is None:
                stream_arn = (
                    self._stream.arn
                    or self._client.describe_stream_summary(StreamName=self._stream.name or "")[
                        "StreamDescriptionSummary"
                    ]["StreamARN"]
                )
                described = self._client.describe_stream_consumer(
                    StreamARN=stream_arn, ConsumerName=self._name
                )["ConsumerDescription"]
                if described["ConsumerStatus"] != "ACTIVE":
                    raise RuntimeError(f"consumer {self._name} is {described['ConsumerStatus']}")
                self._arn = described["ConsumerARN"]
            return self._arn

    def forget(self) -> None:
        """Look the ARN up again next time (the consumer was deregistered, perhaps
        registered anew)."""
        with self._lock:
            self._arn = None


class FanOutKinesisSource:
    """A Kinesis source whose readers subscribe (enhanced fan-out); shard listing and the
    backlog probe are the polling source's."""

    def __init__(
        self,
        polling: KinesisSource,
        consumer_name: str,
        resubscribe_seconds: float = RESUBSCRIBE_SECONDS,
    ) -> None:
        self.polling = polling
        self.consumer_arn = ConsumerArn(polling.client, polling.stream, consumer_name)
        self.resubscribe_seconds = resubscribe_seconds

    def list_shards(self) -> list[Shard]:
        return self.polling.list_shards()

    def backlog(self, shard_id: str, start: StartPosition) -> int | None:
        return self.polling.backlog(shard_id, start)

    def incarnation(self) -> str:
        return self.polling.incarnation()

    def open_reader(self, shard_id: str, start: StartPosition) -> FanOutShardReader:
        return FanOutShardReader(
            self.polling.client,
            self.polling.stream,
            self.consumer_arn,
            shard_id,
            start,
            self.resubscribe_seconds,
            self.consumer_arn.forget,
        )
