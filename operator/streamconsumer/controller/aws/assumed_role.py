"""The operator's AWS identity for a namespace whose `awsAccess` names a `roleArn`
(docs/security.md#a-role-per-namespace): the role, assumed through STS with the
operator's own credentials, in a boto3 Session that botocore keeps fresh
(`AssumeRoleCredentialFetcher` behind `DeferredRefreshableCredentials`: fetched at the
first call, renewed before they expire, under botocore's own lock).

One Session per role, external ID, session name and region, made once and shared by every
client made for it, so they share one refresh. Only the operator's own calls use it:
workers read with their pods' identity."""

from __future__ import annotations

import functools
import hashlib
import logging
import re
import threading
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import boto3
import botocore.session
from botocore.credentials import (
    AssumeRoleCredentialFetcher,
    CredentialProvider,
    CredentialResolver,
    DeferredRefreshableCredentials,
)

from streamconsumer.sources.aws import client_options

log = logging.getLogger(__name__)

# IAM's own grammar: a partition, an account, an optional path, a role name.
ROLE_ARN_PATTERN = (
    r"^arn:aws(-[a-z]+)*:iam::[0-9]{12}:role/([\x21-\x2e\x30-\x7e]+/)*[A-Za-z0-9+=,.@_-]{1,64}$"
)
EXTERNAL_ID_PATTERN = r"^[A-Za-z0-9+=,.@:/_-]{2,1224}$"  # STS' limits on ExternalId
SESSION_NAME_LIMIT = 64  # STS' limit on RoleSessionName
SESSION_PREFIX = "streamconsumer-"
_NOT_IN_SESSION_NAME = re.compile(r"[^A-Za-z0-9+=,.@_-]")

# What an STS refusal means (Kinesis and DynamoDB say AccessDeniedException instead).
ERRORS = {
    "AccessDenied": "STS refused a role: a namespace's roleArn must trust the operator's "
    "role, which needs sts:AssumeRole on it (docs/security.md#a-role-per-namespace)",
}


def session_name(namespace: str) -> str:
    """`streamconsumer-<namespace>`, as the role's CloudTrail entries show it; a longer
    one keeps a prefix and gains a hash of the whole after a '.', which no namespace (a
    DNS label) has: never another namespace's whole name."""
    full = _NOT_IN_SESSION_NAME.sub("-", SESSION_PREFIX + namespace)
    if len(full) <= SESSION_NAME_LIMIT:
        return full
    digest = hashlib.sha256(namespace.encode()).hexdigest()[:16]
    return f"{full[: SESSION_NAME_LIMIT - len(digest) - 1]}.{digest}"


@dataclass(frozen=True)
class Role:
    role_arn: str
    external_id: str | None
    session_name: str


class _WithholdCredentials(logging.Filter):
    """botocore logs every answer's body at DEBUG (the operator's --debug): STS's holds
    the role's secret key, which must never reach a log."""

    def filter(self, record: logging.LogRecord) -> bool:
        if "SecretAccessKey" in record.getMessage():
            record.msg, record.args = "Response body withheld: it holds credentials", ()
        return True


_WITHHOLD = _WithholdCredentials()


def own_identity() -> botocore.session.Session:
    """The operator's own credentials (botocore's usual chain: IRSA, Pod Identity, the
    environment...), which it assumes roles with; STS regional, whatever the
    environment says (AWS_STS_REGIONAL_ENDPOINTS=legacy would send every region's calls
    to us-east-1's global endpoint)."""
    logging.getLogger("botocore.parsers").addFilter(_WITHHOLD)  # once: the same filter
    own = botocore.session.Session()
    own.set_config_variable("sts_regional_endpoints", "regional")
    return own


def sts_clients(own: botocore.session.Session, region: str | None) -> Callable[..., Any]:
    """How AssumeRole's client is made (`Session.create_client`'s arguments): STS of the
    source's region, unless botocore's own AWS_ENDPOINT_URL_STS names another endpoint;
    calls that end in seconds."""
    return functools.partial(own.create_client, **client_options(region, None))


class _AssumedRoleProvider(CredentialProvider):
    """The one credential provider of a role's Session: credentials that call AssumeRole
    when first used and again before they expire. None without credentials of our own
    to assume it with (a call then fails with botocore's NoCredentialsError)."""

    METHOD = "assume-role"
    CANONICAL_NAME = "custom-streamconsumer-assume-role"  # botocore asks custom- for ours

    def __init__(self, own: botocore.session.Session, role: Role, region: str | None):
        super().__init__()
        self._own, self._role, self._region = own, role, region

    def load(self) -> DeferredRefreshableCredentials | None:
        source = self._own.get_credentials()
        if source is None:
            return None
        extra = {"RoleSessionName": self._role.session_name}
        if self._role.external_id is not None:
            extra["ExternalId"] = self._role.external_id
        sts = sts_clients(self._own, self._region)
        fetcher = AssumeRoleCredentialFetcher(sts, source, self._role.role_arn, extra_args=extra)
        return DeferredRefreshableCredentials(fetcher.fetch_credentials, self.METHOD)


# Sessions kept for reuse, the least recently asked for going first: the region is the
# tenant's to write, so the keys are theirs to multiply. A consumer's source holds its own
# Session's clients, so one let go here is only made again (one more AssumeRole) if asked.
MAX_SESSIONS = 256


class RoleSessions:
    """Sessions by role (ARN, external ID, session name) and region, each made once while
    kept (at most `max_sessions`), all sharing the operator's botocore data (endpoints,
    service models: several MB a Session otherwise); any thread may ask."""

    def __init__(self, max_sessions: int = MAX_SESSIONS) -> None:
        self._lock = threading.Lock()
        self._own: botocore.session.Session | None = None
        self._max = max_sessions
        self._sessions: OrderedDict[tuple[Role, str | None], boto3.Session] = OrderedDict()

    def session(self, role: Role, region: str | None) -> boto3.Session:
        with self._lock:
            key = (role, region)
            if key in self._sessions:
                self._sessions.move_to_end(key)
            else:
                self._sessions[key] = self._make(role, region)
                while len(self._sessions) > self._max:
                    self._sessions.popitem(last=False)
            return self._sessions[key]

    def _make(self, role: Role, region: str | None) -> boto3.Session:
        if self._own is None:  # resolved once, for every role
            self._own = own_identity()
        assumed = botocore.session.Session()
        # The data every Session would otherwise load and keep for itself (read-only).
        assumed.register_component("data_loader", self._own.get_component("data_loader"))
        resolver = CredentialResolver([_AssumedRoleProvider(self._own, role, region)])
        assumed.register_component("credential_provider", resolver)
        # Loaded here, under the lock: every client of the Session gets this one object
        # (no call to STS yet: the credentials are fetched on first use).
        assumed.get_credentials()
        log.info("AWS calls for session %s assume %s", role.session_name, role.role_arn)
        return boto3.Session(botocore_session=assumed, region_name=region)


SESSIONS = RoleSessions()
