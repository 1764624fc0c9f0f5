"""A stream kind is one module: the pieces every kind shares are defined once (the AWS
error reading, SHARD_END), and a new kind is one module plus one registration."""

from __future__ import annotations

import re
from pathlib import Path

from botocore.exceptions import ClientError

from streamconsumer.core import lineage
from streamconsumer.sources.aws import AwsError, aws_error

PACKAGE = Path(lineage.__file__).resolve().parents[1]


def sources_of_the_package() -> dict[str, str]:
    return {
        str(path.relative_to(PACKAGE)): path.read_text() for path in PACKAGE.rglob("*.py")
    }


def test_an_aws_error_is_read_in_one_place() -> None:
    readers = [
        name
        for name, text in sources_of_the_package().items()
        if re.search(r"""\.response\.get\(\s*["']Error["']|\.response\[["']Error["']\]""", text)
    ]
    assert readers == ["sources/aws.py"]


def test_aws_error_reads_a_service_error_and_anything_else() -> None:
    error = ClientError({"Error": {"Code": "Throttled", "Message": "slow down"}}, "GetRecords")
    assert aws_error(error) == AwsError("Throttled", "slow down")
    assert aws_error(ClientError({}, "GetRecords")).code == ""
    assert aws_error(TimeoutError("read timed out")) == AwsError("", "read timed out")


def test_shard_end_is_defined_once() -> None:
    defining = [
        name
        for name, text in sources_of_the_package().items()
        if re.search(r"^SHARD_END\s*(:[^=]*)?=", text, re.MULTILINE)
    ]
    assert defining == ["core/lineage.py"]
    from streamconsumer.models.api import SHARD_END as from_the_wire
    from streamconsumer.processor import SHARD_END as for_processors

    assert from_the_wire == for_processors == lineage.SHARD_END == "SHARD_END"
