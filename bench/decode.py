"""Decoding one GetRecords answer of 1,000 records: CPU seconds of botocore's parser
against the fast path (`sources/fast_decode.py`: its `before-parse` handler, then
botocore's parse of the empty body it leaves), measured in the same run, for Kinesis
(100-byte records) and DynamoDB Streams (new and old images of ten attributes). Also the
whole way to our Records (`user_records`), where the rest of the reading adds its cost."""

from __future__ import annotations

import base64
import json
import statistics
import time
from collections.abc import Callable, Iterable
from typing import Any

import botocore.session
from botocore.parsers import create_parser

from bench.results import record
from streamconsumer.processor import Record
from streamconsumer.sources import dynamodb_streams, kinesis_polling
from streamconsumer.sources.fast_decode import FastGetRecords

RECORDS, REPEAT = 1000, 15
ARRIVED = 1_795_953_600.0


def kinesis_answer() -> bytes:
    records = [
        {
            "SequenceNumber": str(49_590_338_271_490_256_608_559_692_538_361_571 + i),
            "ApproximateArrivalTimestamp": ARRIVED + i / 1000,
            "Data": base64.b64encode(i.to_bytes(4, "big") * 25).decode(),  # 100 bytes
            "PartitionKey": f"user-{i % 97}",
        }
        for i in range(RECORDS)
    ]
    return json.dumps(
        {"Records": records, "NextShardIterator": "AAAA" * 50, "MillisBehindLatest": 1200}
    ).encode()


def streams_answer() -> bytes:
    def image(i: int) -> dict[str, Any]:
        return {
            "pk": {"S": f"order#{i}"},
            "sk": {"N": str(i)},
            "total": {"N": f"{i}.50"},
            "status": {"S": "paid"},
            "tags": {"SS": ["a", "b"]},
            "blob": {"B": base64.b64encode(b"\x00" * 16).decode()},
            "paid": {"BOOL": True},
            "note": {"NULL": True},
            "lines": {"L": [{"M": {"sku": {"S": "x"}, "qty": {"N": "2"}}}]},
            "meta": {"M": {"source": {"S": "web"}}},
        }

    records = [
        {
            "eventID": f"{i:032x}",
            "eventName": "MODIFY",
            "eventVersion": "1.1",
            "eventSource": "aws:dynamodb",
            "awsRegion": "us-east-1",
            "dynamodb": {
                "ApproximateCreationDateTime": ARRIVED + i,
                "Keys": {"pk": {"S": f"order#{i}"}, "sk": {"N": str(i)}},
                "NewImage": image(i),
                "OldImage": image(i),
                "SequenceNumber": f"{i:021d}",
                "SizeBytes": 420,
                "StreamViewType": "NEW_AND_OLD_IMAGES",
            },
        }
        for i in range(RECORDS)
    ]
    return json.dumps({"Records": records, "NextShardIterator": "arn|1|AAAA"}).encode()


def cpu_seconds(step: Callable[[], object]) -> float:
    """Median CPU seconds of `step` over REPEAT runs."""
    samples = []
    for _ in range(REPEAT):
        started = time.process_time()
        step()
        samples.append(time.process_time() - started)
    return statistics.median(samples)


def compare(
    service: str, body: bytes, to_records: Callable[[Iterable[Any]], Iterable[Record]]
) -> dict[str, float]:
    model = botocore.session.get_session().get_service_model(service)
    output = model.operation_model("GetRecords").output_shape
    assert output is not None
    parser = create_parser("json")
    fast = FastGetRecords(service)

    def answer() -> dict[str, Any]:
        return {"body": body, "headers": {}, "status_code": 200, "context": {}}

    def botocore_decode() -> dict[str, Any]:
        parsed: dict[str, Any] = parser.parse(answer(), output)
        return parsed

    def fast_decode() -> dict[str, Any]:
        response = answer()  # the hook, and around it what botocore's endpoint does
        customized: dict[str, Any] = {}
        fast(response_dict=response, customized_response_dict=customized)
        parsed: dict[str, Any] = parser.parse(response, output)
        parsed.update(customized)
        return parsed

    assert fast_decode().keys() == botocore_decode().keys()
    slow_s, fast_s = cpu_seconds(botocore_decode), cpu_seconds(fast_decode)
    slow_all = cpu_seconds(lambda: list(to_records(botocore_decode()["Records"])))
    fast_all = cpu_seconds(lambda: list(to_records(fast_decode()["Records"])))
    name = "kinesis" if service == "kinesis" else "dynamodb"
    print(
        f"{name}: decode {slow_s * 1000:.2f} ms botocore, {fast_s * 1000:.2f} ms fast "
        f"({slow_s / fast_s:.1f}x); to Records {slow_all * 1000:.2f} ms, "
        f"{fast_all * 1000:.2f} ms ({slow_all / fast_all:.1f}x)"
    )
    return {
        f"decode_seconds_botocore_{name}": slow_s,
        f"decode_seconds_fast_{name}": fast_s,
        f"decode_speedup_{name}": slow_s / fast_s,
        f"read_speedup_{name}": slow_all / fast_all,
    }


def main() -> None:
    figures = compare(
        "kinesis", kinesis_answer(), lambda raw: kinesis_polling.user_records(raw, None)
    )
    figures |= compare("dynamodbstreams", streams_answer(), dynamodb_streams.user_records)
    record(figures)


if __name__ == "__main__":
    main()
