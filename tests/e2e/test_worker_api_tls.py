"""The worker API over TLS on the real parts: the operator process serves HTTPS from the
CA it keeps in a Secret on the real apiserver, workers (admitted under Pod Security
`restricted`) verify it through their CA bundle and process every record; a worker
given another CA sends nothing, not even its token."""

from __future__ import annotations

import base64
import datetime as dt
import http.server
import os
import ssl
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx
import pytest
from kubernetes import client as k8s

from streamconsumer.controller.certificates import tls
from streamconsumer.controller.certificates.serving import ManagedServing
from streamconsumer.worker.config import WorkerConfig
from testbed.scenario import TESTS_DIR, Scenario
from testbed.waiting import wait_for

CA_SECRET = "streamconsumer-operator-ca"  # OperatorConfig's default names
CA_BUNDLE = "streamconsumer-operator-ca-bundle"


def test_workers_verify_the_operators_managed_ca_and_process_everything(
    scenario: Scenario,
) -> None:
    core = k8s.CoreV1Api(scenario.api_client)
    # Worker pods are created by the real ReplicaSet controller: refused if not restricted.
    core.patch_namespace(
        scenario.namespace,
        {"metadata": {"labels": {"pod-security.kubernetes.io/enforce": "restricted"}}},
    )
    scenario.tls = True
    scenario.start(shards=2, replicas=2)
    assert scenario.operator is not None
    assert scenario.operator.url.startswith("https://")
    scenario.produce(200)
    wait_for(scenario.all_processed, 90, "every record processed over HTTPS")
    scenario.delivered(duplicates_at_most=0)

    secret = core.read_namespaced_secret(CA_SECRET, scenario.namespace)
    ca_pem = base64.b64decode((secret.data or {})["tls.crt"]).decode()
    bundle = core.read_namespaced_config_map(f"{scenario.name}-operator-ca", scenario.namespace)
    assert bundle.data == {"ca.crt": ca_pem}, "workers get the CA certificate, not its key"
    assert bundle.metadata is not None
    owners = bundle.metadata.owner_references or []
    assert [(o.kind, o.name) for o in owners] == [("StreamConsumer", scenario.name)]
    # What the ServiceMonitor trusts: the CA certificate in the operator's namespace.
    published = core.read_namespaced_config_map(CA_BUNDLE, scenario.namespace)
    assert published.data == {"ca.crt": ca_pem}
    # The operator's certificate verifies against that CA and nothing else.
    trusting = ssl.create_default_context(cadata=ca_pem)
    assert httpx.get(f"{scenario.operator.url}/healthz", verify=trusting).status_code == 200
    other = ssl.create_default_context(cadata=tls.make_ca(now()).cert_pem.decode())
    with pytest.raises(httpx.ConnectError, match="CERTIFICATE_VERIFY_FAILED"):
        httpx.get(f"{scenario.operator.url}/healthz", verify=other)

    # A restart reads the same CA (as a second replica would): workers carry on.
    scenario.operator.stop()
    scenario.start_operator()
    secret_after = core.read_namespaced_secret(CA_SECRET, scenario.namespace)
    assert secret_after.data == secret.data
    scenario.produce(50)
    wait_for(scenario.all_processed, 90, "records after an operator restart")
    scenario.delivered(duplicates_at_most=0)


def test_a_worker_that_does_not_trust_the_server_sends_no_token(tmp_path: Path) -> None:
    trusted, untrusted = tls.make_ca(now()), tls.make_ca(now())
    (tmp_path / "trusted.crt").write_bytes(trusted.cert_pem)
    (tmp_path / "untrusted.crt").write_bytes(untrusted.cert_pem)
    serving = ManagedServing(trusted, ["127.0.0.1"], now())
    with recording_server(serving.context) as (url, seen):
        # The control: trusting the server's CA, the worker does call, with its token.
        run_worker(
            tmp_path,
            url,
            tmp_path / "trusted.crt",
            "trusting",
            until=lambda _: any("Bearer the-worker-token" in h for h in seen),
        )
        seen.clear()
        log = run_worker(
            tmp_path,
            url,
            tmp_path / "untrusted.crt",
            "distrusting",
            until=lambda log: "nothing was sent, not even the token" in log,
        )
        assert seen == [], "not one request reached the server"
        assert "not signed by the operator CA" in log
        assert "nothing was sent, not even the token" in log
        assert "level=ERROR" in log


def now() -> dt.datetime:
    return dt.datetime.now(dt.UTC)


@contextmanager
def recording_server(context: ssl.SSLContext) -> Iterator[tuple[str, list[str]]]:
    """An HTTPS server that records each request's Authorization header and answers 503
    (so the worker keeps trying)."""
    seen: list[str] = []

    class Recorder(http.server.BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            seen.append(self.headers.get("Authorization", ""))
            self.send_response(503)
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, *_: object) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Recorder)
    server.socket = context.wrap_socket(server.socket, server_side=True)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"https://127.0.0.1:{server.server_address[1]}", seen
    finally:
        server.shutdown()
        server.server_close()


def run_worker(
    tmp_path: Path, url: str, ca_file: Path, name: str, until: Callable[[str], bool]
) -> str:
    """A real worker process against `url` until `until(its log so far)`; returns its log.
    The worker keeps retrying by design, so it is stopped then."""
    token = tmp_path / "token"
    token.write_text("the-worker-token")
    config = WorkerConfig.model_validate(
        {
            "operator_url": url,
            "namespace": "ns",
            "consumer": "clicks",
            "worker_name": name,
            "token_path": str(token),
            "ca_path": str(ca_file),
            "entrypoint": "testbed.recording:RecordingProcessor",
            "stream_name": "clicks",
            "region": "us-east-1",
            "endpoint_url": "http://127.0.0.1:9",
            "metrics_port": 0,
            "drain_seconds": 1,
        }
    )
    env = {
        "PATH": os.environ["PATH"],
        "PYTHONPATH": str(TESTS_DIR),
        "RECORD_DIR": str(tmp_path / "records"),
        "STREAMCONSUMER_LOG_LEVEL": "INFO",
        **config.to_env(),
    }
    process = subprocess.Popen(
        [sys.executable, "-m", "streamconsumer.worker"],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    lines: list[str] = []
    reader = threading.Thread(target=_read_into, args=(process, lines), daemon=True)
    reader.start()
    try:
        wait_for(lambda: until("".join(lines)), 120, name, details=lambda: "".join(lines))
    finally:
        process.kill()
        process.wait(timeout=10)
        reader.join(timeout=10)
    return "".join(lines)


def _read_into(process: subprocess.Popen[str], lines: list[str]) -> None:
    assert process.stdout is not None
    for line in process.stdout:
        lines.append(line)
