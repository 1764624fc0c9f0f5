"""Refused worker API calls (401, 403) in the operator's log, rate-limited: at most one
line per source address and reason a minute, the next one saying how many were held
back meanwhile, so a flood of junk costs a line a minute, not a line a call. Each
refusal is also counted, exactly, in `streamconsumer_worker_api_refusals` (api.py).

A line is `key=value` pairs: the status, the reason (answers.py's codes), the source
address, the consumer the path names and, where known, the reviewed token's account and
pod and the worker the body speaks for. Never the token, nor anything else of the body.
What the caller chose (the path, the worker's name) is quoted and cut short, so it can
neither break a line nor make it long."""

from __future__ import annotations

import json
import logging
import re

from streamconsumer.controller.worker_api.answers import Refusal
from streamconsumer.core.log_limit import LogLimit

log = logging.getLogger(__name__)

LOG_PERIOD_SECONDS = 60.0
# (source, reason) pairs remembered: a few hundred bytes each.
MAX_LOGGED_KEYS = 10_000
MAX_VALUE_CHARS = 256  # a namespace/name fits; a caller's longer text is cut
_PLAIN = re.compile(r"[A-Za-z0-9._:/@\[\]-]+")


class RefusalLog:
    def __init__(self, period: float = LOG_PERIOD_SECONDS, max_keys: int = MAX_LOGGED_KEYS) -> None:
        self.limit: LogLimit[tuple[str, str]] = LogLimit(period, max_keys)

    def refused(
        self, status: int, refusal: Refusal, source: str, consumer: str, now: float
    ) -> None:
        """A refused call from `source` to `consumer` (namespace/name, as the path says),
        at `now` (the API's monotonic clock)."""
        held = self.limit.allow((source, refusal.reason), now)
        if held is not None:
            log.warning("%s", line(status, refusal, source, consumer, held))


def line(status: int, refusal: Refusal, source: str, consumer: str, suppressed: int) -> str:
    fields: dict[str, object] = {
        "status": status,
        "reason": refusal.reason,
        "source": source or "unknown",
        "consumer": consumer,
        "account": refusal.account,
        "pod": refusal.pod,
        "worker": refusal.worker,
        # Lines of this source and reason held back since its last one.
        "suppressed": suppressed or None,
    }
    pairs = (f"{key}={_value(str(v))}" for key, v in fields.items() if v is not None)
    return "worker API: call refused " + " ".join(pairs)


def _value(text: str) -> str:
    """`text` as it is when plain, else quoted with every control and non-ASCII
    character escaped; cut at MAX_VALUE_CHARS."""
    cut = text[:MAX_VALUE_CHARS] + ("..." if len(text) > MAX_VALUE_CHARS else "")
    return cut if _PLAIN.fullmatch(cut) else json.dumps(cut)
