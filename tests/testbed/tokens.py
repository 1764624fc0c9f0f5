"""A projected ServiceAccount token's shape, for tests of the operator's token checks."""

from __future__ import annotations

import base64
import json
import time
from typing import Any

from streamconsumer.controller.worker_api.auth import AUDIENCE


def token(**claims: Any) -> str:
    """Unsigned (TokenReview judges the signature, and is faked or unreachable in these
    tests): worker w of consumer c in namespace n, meant for us, valid for an hour;
    `claims` replace any of that."""
    payload = {
        "aud": [AUDIENCE],
        "exp": time.time() + 3600,
        "sub": "system:serviceaccount:n:c-worker",
        "kubernetes.io": {"namespace": "n", "pod": {"name": "w", "uid": "u"}},
    } | claims
    encoded = base64.urlsafe_b64encode(json.dumps(payload).encode()).decode().rstrip("=")
    return f"eyJhbGciOiJSUzI1NiJ9.{encoded}.c2lnbmF0dXJl"
