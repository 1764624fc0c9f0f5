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
from streamconsumer.processor import CheckpointError, LeaseLostError


class OperatorUnavailable(RuntimeError):
    """The operator could not be reached or failed; try again later."""


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
        self._http = httpx.Client(base_url=base_url, timeout=timeout)

    def _post(self, path: str, body: dict[str, object]) -> httpx.Response:
        # Projected tokens are rotated on disk: read it for every call.
        token = self._token_path.read_text().strip()
        try:
            response = self._http.post(
                self._prefix + path, json=body, headers={"Authorization": f"Bearer {token}"}
            )
        except httpx.HTTPError as error:
            raise OperatorUnavailable(f"{path}: {error}") from error
        if response.status_code >= 500:
            raise OperatorUnavailable(f"{path}: HTTP {response.status_code}: {response.text}")
        return response

    @staticmethod
    def _message(response: httpx.Response) -> str:
        try:
            return str(response.json().get("message", response.text))
        except ValueError:
            return response.text

    def heartbeat(self, request: HeartbeatRequest) -> HeartbeatResponse:
        response = self._post("/heartbeat", request.wire())
        if response.status_code != 200:
            raise OperatorUnavailable(
                f"heartbeat refused ({response.status_code}): {self._message(response)}"
            )
        return HeartbeatResponse.model_validate_json(response.content)

    def checkpoint(self, request: CheckpointRequest) -> CheckpointResponse:
        response = self._post("/checkpoint", request.wire())
        if response.status_code == 409:
            raise LeaseLostError(self._message(response))
        if response.status_code == 400:
            raise CheckpointError(self._message(response))
        if response.status_code != 200:
            raise OperatorUnavailable(
                f"checkpoint refused ({response.status_code}): {self._message(response)}"
            )
        return CheckpointResponse.model_validate_json(response.content)

    def close(self) -> None:
        self._http.close()
