"""The worker's side of the worker API: heartbeat and checkpoint over HTTP (httpx)."""

from __future__ import annotations

from pathlib import Path

import httpx

from streamconsumer.models import (
    CheckpointRequest,
    CheckpointResponse,
    HeartbeatRequest,
    HeartbeatResponse,
)


class OperatorUnavailable(RuntimeError):
    """No answer, or one that means "later" (5xx, 503 while the operator starts)."""


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
    ) -> None:
        self._prefix = f"/v1/namespaces/{namespace}/streamconsumers/{consumer}"
        self._token_path = Path(token_path)
        # A wait=true checkpoint may be held until the status is written (up to 10 s).
        self._http = httpx.Client(base_url=base_url, timeout=httpx.Timeout(timeout, read=15.0))

    def _post(
        self, path: str, body: dict[str, object], timeout: float | None = None
    ) -> httpx.Response:
        try:
            # Projected tokens are rotated on disk: read it for every call.
            token = self._token_path.read_text().strip()
            response = self._http.post(
                self._prefix + path,
                json=body,
                headers={"Authorization": f"Bearer {token}"},
                timeout=httpx.USE_CLIENT_DEFAULT if timeout is None else timeout,
            )
        except (httpx.HTTPError, OSError) as error:
            raise OperatorUnavailable(f"{path}: {error}") from error
        if response.status_code >= 500:
            raise OperatorUnavailable(f"{path}: HTTP {response.status_code}: {_message(response)}")
        return response

    def heartbeat(
        self, request: HeartbeatRequest, timeout: float | None = None
    ) -> HeartbeatResponse:
        response = self._post("/heartbeat", request.wire(), timeout)
        if response.status_code != 200:
            raise OperatorRefused(
                f"heartbeat refused ({response.status_code}): {_message(response)}"
            )
        return HeartbeatResponse.model_validate_json(response.content)

    def checkpoint(
        self, request: CheckpointRequest, timeout: float | None = None
    ) -> CheckpointResponse:
        response = self._post("/checkpoint", request.wire(), timeout)
        if response.status_code == 200:
            return CheckpointResponse.model_validate_json(response.content)
        if response.status_code in (400, 409):
            raise OperatorRefused(_message(response), lease_lost=response.status_code == 409)
        # 401/403/404: this worker's standing is the heartbeat's business; retry.
        raise OperatorUnavailable(
            f"checkpoint refused ({response.status_code}): {_message(response)}"
        )

    def close(self) -> None:
        self._http.close()


def _message(response: httpx.Response) -> str:
    try:
        return str(response.json().get("message", response.text))
    except ValueError:
        return response.text
