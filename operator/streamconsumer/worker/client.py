"""The worker's side of the worker API: heartbeat and checkpoint over HTTPS (httpx),
or plain HTTP for local development.

Every call says our wire version (a header); every answer says the operator's. An
answer that does not parse (a newer operator's changed field, a proxy's error page) is a
failed call, retried like an outage: it never ends the thread that made the call. What
an answer means is read by functions of status and bytes (`heartbeat_answer`,
`checkpoint_answer`), which the simulation runs too."""

from __future__ import annotations

import contextlib
import json
import logging
import ssl
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

import httpx
from pydantic import BaseModel, ValidationError

from streamconsumer.models import (
    CheckpointRequest,
    CheckpointResponse,
    HeartbeatRequest,
    HeartbeatResponse,
)
from streamconsumer.models.api import (
    MAX_CHECKPOINT_HOLD_SECONDS,
    WIRE_VERSION,
    WIRE_VERSION_HEADER,
    wire_version,
)
from streamconsumer.worker.shard import Answer

log = logging.getLogger(__name__)
Parsed = TypeVar("Parsed", bound=BaseModel)


class OperatorUnavailable(RuntimeError):
    """No answer, or one that means "later" (5xx, 503 while the operator starts)."""


class OperatorUntrusted(OperatorUnavailable):
    """The operator's certificate is not signed by the CA we were given: the TLS
    handshake failed, so nothing was sent (no token). Retried like an outage, with the
    CA file read again (a rotated CA arrives through the mounted ConfigMap)."""


class OperatorRefused(RuntimeError):
    """A definite no: a heartbeat refused (401/403/404), a checkpoint fenced (409,
    `lease_lost`) or refused as invalid (400)."""

    def __init__(self, message: str, lease_lost: bool = False) -> None:
        super().__init__(message)
        self.lease_lost = lease_lost


class OperatorClient:
    def __init__(
        self,
        base_url: str,
        namespace: str,
        consumer: str,
        token_path: str,
        timeout: float = 5.0,
        ca_path: str | None = None,
    ) -> None:
        self._base_url = base_url
        self._prefix = f"/v1/namespaces/{namespace}/streamconsumers/{consumer}"
        self._token_path = Path(token_path)
        self._ca_path = ca_path
        # Verify against the operator's CA only when given one; else httpx's default CAs.
        self._tls = ssl.create_default_context(cafile=ca_path) if ca_path else None
        self.operator_wire_version: int | None = None  # as its last answer said
        # Each call passes its own timeout (WorkerCore.request_timeout, waiting_timeout);
        # this default is the longest a waiting checkpoint may take.
        self._http = httpx.Client(
            base_url=base_url,
            timeout=httpx.Timeout(timeout, read=timeout + MAX_CHECKPOINT_HOLD_SECONDS),
            verify=self._tls if self._tls is not None else True,
        )

    def _post(
        self, path: str, body: dict[str, object], timeout: float | None = None
    ) -> tuple[int, bytes]:
        """The answer's status and body; OperatorUnavailable if none came."""
        try:
            # Projected tokens are rotated on disk: read it for every call.
            token = self._token_path.read_text().strip()
            response = self._http.post(
                self._prefix + path,
                json=body,
                headers=request_headers(token),
                timeout=httpx.USE_CLIENT_DEFAULT if timeout is None else timeout,
            )
        except (httpx.HTTPError, OSError) as error:
            if _untrusted(error):
                self._reload_ca()
                raise OperatorUntrusted(
                    f"{path}: {self._base_url} presents a certificate not signed by the "
                    f"operator CA in {self._ca_path or 'the system trust store'} ({error}); "
                    "nothing was sent, not even the token"
                ) from error
            raise OperatorUnavailable(f"{path}: {error}") from error
        self._heard(response.headers.get(WIRE_VERSION_HEADER))
        return response.status_code, response.content

    def heartbeat(
        self, request: HeartbeatRequest, timeout: float | None = None
    ) -> HeartbeatResponse:
        return heartbeat_answer(*self._post("/heartbeat", request.wire(), timeout))

    def checkpoint(
        self, request: CheckpointRequest, timeout: float | None = None
    ) -> CheckpointResponse:
        return checkpoint_answer(*self._post("/checkpoint", request.wire(), timeout))

    def _heard(self, header: str | None) -> None:
        """Notes the operator's wire version (none: version 1, before versions)."""
        version = wire_version(header)
        if version != self.operator_wire_version:
            self.operator_wire_version = version
            if version != WIRE_VERSION:
                log.info(
                    "the operator speaks wire version %.40r, this worker %d", header, WIRE_VERSION
                )

    def _reload_ca(self) -> None:
        # Adds the file's CA (a rotated one) to those trusted; new connections use it.
        if self._tls is not None and self._ca_path is not None:
            # Unreadable: the next attempt says untrusted again.
            with contextlib.suppress(OSError, ssl.SSLError):
                self._tls.load_verify_locations(cafile=self._ca_path)

    def close(self) -> None:
        self._http.close()


def _untrusted(error: BaseException) -> bool:
    """A certificate verification failure anywhere in the chain httpx raised."""
    seen: BaseException | None = error
    while seen is not None:
        if isinstance(seen, ssl.SSLCertVerificationError):
            return True
        seen = seen.__cause__ or seen.__context__
    return False


def request_headers(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}", WIRE_VERSION_HEADER: str(WIRE_VERSION)}


def _later(status: int) -> bool:
    """An answer that means "come back" whoever gave it (the operator, a proxy)."""
    return status >= 500 or status in (408, 429) or 300 <= status < 400


def heartbeat_answer(status: int, content: bytes) -> HeartbeatResponse:
    """What the operator's answer to a heartbeat means (the simulation reads it so too):
    OperatorUnavailable (5xx, 429, 3xx), try again soon; OperatorRefused (another 4xx:
    401/403/404 mostly), which counts toward giving up."""
    if _later(status):
        raise OperatorUnavailable(f"heartbeat: HTTP {status}: {_message(content)}")
    if status != 200:
        raise OperatorRefused(f"heartbeat refused ({status}): {_message(content)}")
    return _parsed(HeartbeatResponse, content, "heartbeat")


def checkpoint_answer(status: int, content: bytes) -> CheckpointResponse:
    """What the operator's answer to a checkpoint means: OperatorRefused for a stale
    epoch (409, the lease is lost) or a request it will never take (400); every other
    failure is OperatorUnavailable, to send again (401/403/404: this worker's standing
    is the heartbeat's business)."""
    if status == 200:
        return _parsed(CheckpointResponse, content, "checkpoint")
    if status in (400, 409):
        raise OperatorRefused(_message(content), lease_lost=status == 409)
    raise OperatorUnavailable(f"checkpoint: HTTP {status}: {_message(content)}")


def checkpoint_outcome(shard_id: str, send: Callable[[], CheckpointResponse]) -> Answer:
    """A checkpoint's outcome as its ShardMachine takes it."""
    try:
        response = send()
    except OperatorUnavailable as error:
        log.warning("%s: checkpoint waits for the operator: %s", shard_id, error)
        return Answer.UNREACHABLE
    except OperatorRefused as refused:
        log.warning("%s: checkpoint refused: %s", shard_id, refused)
        return Answer.LOST if refused.lease_lost else Answer.INVALID
    except Exception:  # never end the shard's thread with a request in flight
        log.exception("%s: checkpoint answer not understood; sent again", shard_id)
        return Answer.UNREACHABLE
    return Answer.SAVED if response.persisted else Answer.ACCEPTED


def _parsed(model: type[Parsed], content: bytes, call: str) -> Parsed:
    try:
        return model.model_validate_json(content)
    except ValidationError as error:
        raise OperatorUnavailable(
            f"{call}: the operator's answer does not parse ({error.error_count()} errors, "
            f"first: {error.errors()[0]['msg']}); retried"
        ) from error


def _message(content: bytes) -> str:
    text = content.decode(errors="replace")
    try:
        body = json.loads(text)
    except (ValueError, RecursionError):  # not JSON, or nested past the parser's depth
        return text[:500]
    message = body.get("message") if isinstance(body, dict) else None
    return str(message) if message is not None else text[:500]
