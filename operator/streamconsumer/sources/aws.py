"""What a failed AWS call says, read one way for every source and the operator."""

from __future__ import annotations

from typing import NamedTuple

from botocore.exceptions import ClientError


class AwsError(NamedTuple):
    code: str  # "" when the error is not an AWS service's answer
    message: str


def aws_error(error: BaseException) -> AwsError:
    """The service's error code and message of a failed call (botocore's ClientError,
    and EventStreamError, its subclass for errors inside an event stream); for any other
    exception no code, and the exception's text."""
    if isinstance(error, ClientError):
        details = error.response.get("Error", {})
        return AwsError(str(details.get("Code") or ""), str(details.get("Message") or error))
    return AwsError("", str(error))
