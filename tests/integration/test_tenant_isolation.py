"""A tenant's attacks (issues 24, 40) on the real operator process and the real apiserver:
an object of the workers' name that is not the StreamConsumer's, junk tokens by the
thousand, a connection that never finishes its headers, a stream nobody allowed."""

from __future__ import annotations

import asyncio
import contextlib
import http.server
import itertools
import json
import socket
import threading
import time
import uuid
from collections.abc import Iterator, Mapping
from datetime import datetime
from pathlib import Path
from typing import Any

import httpx
import pytest
from kubernetes import client as k8s
from kubernetes.client.exceptions import ApiException, NotFoundException
from prometheus_client.parser import text_string_to_metric_families

from streamconsumer.controller.config import OperatorConfig
from streamconsumer.models import KIND
from streamconsumer.models.api import WIRE_VERSION, WIRE_VERSION_HEADER
from testbed import releases
from testbed.controlplane import ControlPlane
from testbed.kinesis import KinesisEmulator, create_stream
from testbed.kube import StreamConsumers, deployment
from testbed.operator_process import LEADER_LEASE_SECONDS, OperatorProcess
from testbed.specs import consumer_manifest
from testbed.tokens import token
from testbed.waiting import wait_for

HEADER_TIMEOUT_SECONDS = 2.0
REVIEWS_PER_SECOND, REVIEW_BURST = 5.0, 20
WIRE = str(WIRE_VERSION)


@pytest.fixture
def operator(
    control_plane: ControlPlane, namespace: str, tmp_path: Path
) -> Iterator[OperatorProcess]:
    process = OperatorProcess(
        control_plane.kubeconfig,
        namespace,
        tmp_path / "operator",
        env={
            "STREAMCONSUMER_API_HEADER_TIMEOUT_SECONDS": str(HEADER_TIMEOUT_SECONDS),
            "STREAMCONSUMER_TOKEN_REVIEWS_PER_SECOND": str(REVIEWS_PER_SECOND),
            "STREAMCONSUMER_TOKEN_REVIEW_BURST": str(REVIEW_BURST),
        },
    ).start()
    yield process
    process.stop()


def consumer(name: str, endpoint: str | None = None) -> dict[str, Any]:
    source = {"streamName": "clicks", "region": "eu-west-1"}
    if endpoint is not None:
        source["endpointURL"] = endpoint
    return consumer_manifest(name, source={"kinesis": source})


def unrestricted() -> dict[str, Any]:
    """Unrestricted workers that mount the node's container runtime socket."""
    return consumer_manifest(
        "node",
        pod={
            "unrestricted": True,
            "volumes": [{"name": "sock", "hostPath": {"path": "/run/containerd"}}],
        },
    )


def operator_allowing(
    control_plane: ControlPlane, namespace: str, tmp_path: Path, allowed: list[str]
) -> OperatorProcess:
    """An operator whose admins allow unrestricted workers in the `allowed` namespaces."""
    env = {"STREAMCONSUMER_UNRESTRICTED_POD_NAMESPACES": json.dumps(allowed)}
    return OperatorProcess(
        control_plane.kubeconfig, namespace, tmp_path / "operator", env=env
    ).start()


def wait_cleared(consumers: StreamConsumers, name: str, refusal: str) -> None:
    """Until the consumer's Degraded no longer says `refusal`."""
    wait_for(lambda: refusal not in degraded_message(consumers, name), 60, "the refusal cleared")


def degraded_message(consumers: StreamConsumers, name: str) -> str:
    conditions = consumers.get(name).get("status", {}).get("conditions", [])
    return next((c["message"] for c in conditions if c["type"] == "Degraded"), "")


def test_an_object_of_the_workers_name_that_is_not_ours_is_left_untouched(
    api_client: k8s.ApiClient, namespace: str, operator: OperatorProcess
) -> None:
    """Applying with force and adopting took over an existing ServiceAccount
    `<name>-worker` (with its RoleBindings, or an IAM role through IRSA) and had it
    garbage-collected with the StreamConsumer."""
    core, apps = k8s.CoreV1Api(api_client), k8s.AppsV1Api(api_client)
    role = {"eks.amazonaws.com/role-arn": "arn:aws:iam::123456789012:role/platform-admin"}
    core.create_namespaced_service_account(
        namespace,
        k8s.V1ServiceAccount(metadata=k8s.V1ObjectMeta(name="clicks-worker", annotations=role)),
    )
    before = core.read_namespaced_service_account("clicks-worker", namespace).metadata
    consumers = StreamConsumers(api_client, namespace)
    consumers.create(consumer("clicks"))

    wait_for(
        lambda: (
            "ServiceAccount clicks-worker exists and is not this StreamConsumer's"
            in degraded_message(consumers, "clicks")
        ),
        60,
        "a Degraded condition naming the ServiceAccount",
    )
    events = core.list_namespaced_event(namespace, field_selector="reason=ObjectConflict").items
    assert any("ServiceAccount clicks-worker" in (e.message or "") for e in events), events
    after = core.read_namespaced_service_account("clicks-worker", namespace).metadata
    assert after is not None
    assert before is not None
    assert after.resource_version == before.resource_version, "not patched"
    assert not after.owner_references
    assert after.annotations == role
    with pytest.raises(ApiException) as missing:  # no pod ever runs as the borrowed account
        apps.read_namespaced_deployment("clicks-workers", namespace)
    assert missing.value.status == 404

    # Once the account is out of the way, the StreamConsumer's own is made, and owned.
    core.delete_namespaced_service_account("clicks-worker", namespace)

    def owned() -> bool:
        try:
            account = core.read_namespaced_service_account("clicks-worker", namespace)
        except ApiException:
            return False
        refs = (account.metadata.owner_references if account.metadata else None) or []
        return [(r.kind, r.name, r.controller) for r in refs] == [(KIND, "clicks", True)]

    wait_for(owned, 60, "the StreamConsumer's own ServiceAccount")
    wait_for(
        lambda: "clicks-worker" not in degraded_message(consumers, "clicks"),
        60,
        "the conflict cleared from the condition",
    )
    mine = core.read_namespaced_service_account("clicks-worker", namespace).metadata
    assert mine is not None
    assert not mine.annotations, "the IRSA role was the other account's"


def test_a_connection_that_never_finishes_its_headers_is_closed(operator: OperatorProcess) -> None:
    """It stayed open indefinitely (aiohttp's keep-alive timeout was 3,630 s)."""
    host, port = "127.0.0.1", operator.port
    with socket.create_connection((host, port), timeout=30) as connection:
        opened = time.monotonic()
        connection.sendall(b"POST /v1/namespaces/n/streamconsumers/c/heartbeat HTTP/1.1\r\n")
        connection.settimeout(0.5)
        closed_after = None
        while time.monotonic() - opened < HEADER_TIMEOUT_SECONDS + 10:
            try:
                connection.sendall(b"X")  # a header name, a byte at a time
                if connection.recv(1024) == b"":
                    closed_after = time.monotonic() - opened
                    break
            except TimeoutError:
                continue
            except OSError:  # reset
                closed_after = time.monotonic() - opened
                break
    assert closed_after is not None, "still open"
    assert closed_after < HEADER_TIMEOUT_SECONDS + 2, closed_after


class LeaseRenewals:
    """Every renewTime of the operators' Lease seen while it runs, polled."""

    def __init__(self, api_client: k8s.ApiClient, namespace: str) -> None:
        self._api = k8s.CoordinationV1Api(api_client)
        self._namespace = namespace
        self.seen: list[tuple[str, datetime]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._poll, daemon=True)

    def _poll(self) -> None:
        name = OperatorConfig.model_fields["leader_lease_name"].default
        while not self._stop.wait(0.1):
            spec = self._api.read_namespaced_lease(name, self._namespace).spec
            renewed = spec.renew_time if spec is not None else None
            if renewed is not None and (not self.seen or self.seen[-1][1] != renewed):
                assert spec is not None
                self.seen.append((str(spec.holder_identity), renewed))

    def __enter__(self) -> LeaseRenewals:
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        self._thread.join()

    def longest_gap(self) -> float:
        times = [at for _, at in self.seen]
        return max((b - a).total_seconds() for a, b in itertools.pairwise(times))


def token_reviews(plane: ControlPlane) -> float:
    """TokenReviews the apiserver has served, by its own count."""
    _, body = plane.get("/metrics")
    return sum(
        sample.value
        for family in text_string_to_metric_families(body.decode())
        for sample in family.samples
        if sample.name == "apiserver_request_total"
        and sample.labels.get("resource") == "tokenreviews"
    )


def test_junk_tokens_cost_a_bounded_number_of_reviews_and_the_lease_stays_renewed(
    api_client: k8s.ApiClient,
    control_plane: ControlPlane,
    namespace: str,
    operator: OperatorProcess,
) -> None:
    """Each well-formed forged token (right audience, subject shape, expiry; no valid
    signature) cost one TokenReview on a small pool: 1,000 of them held the leader's
    renewals back until it lost its Lease."""
    path = f"/v1/namespaces/{namespace}/streamconsumers/clicks/heartbeat"
    subject = f"system:serviceaccount:{namespace}:clicks-worker"
    forged = [token(sub=subject, jti=uuid.uuid4().hex) for _ in range(1000)]
    reviews_before = token_reviews(control_plane)

    async def flood() -> list[int]:
        limits = httpx.Limits(max_connections=50)
        async with httpx.AsyncClient(base_url=operator.url, limits=limits, timeout=30) as http:
            gate = asyncio.Semaphore(50)

            async def call(junk: str) -> int:
                async with gate:
                    headers = {"Authorization": f"Bearer {junk}", WIRE_VERSION_HEADER: WIRE}
                    response = await http.post(path, json={"worker": "w"}, headers=headers)
                    return response.status_code

            return await asyncio.gather(*(call(junk) for junk in forged))

    with LeaseRenewals(api_client, namespace) as renewals:
        started = time.monotonic()
        statuses = asyncio.run(flood())
        elapsed = time.monotonic() - started
        time.sleep(LEADER_LEASE_SECONDS)  # renewals after the flood too
    reviews = token_reviews(control_plane) - reviews_before
    assert reviews <= REVIEW_BURST + REVIEWS_PER_SECOND * elapsed + 1, (reviews, elapsed)
    assert operator.metric("streamconsumer_token_reviews_total") == reviews
    assert set(statuses) <= {401, 429}, set(statuses)
    assert statuses.count(429) > 0
    holders = {holder for holder, _ in renewals.seen}
    assert len(holders) == 1, f"leadership changed hands: {holders}"
    assert operator.exit_code() is None
    assert renewals.longest_gap() < LEADER_LEASE_SECONDS, renewals.seen


SECRET = "hunter2"


class InternalPage:
    """An internal web page with a password on it, answering every POST 400 (a body
    botocore reads as an error message), counting the calls."""

    def __init__(self) -> None:
        page = f"<html><body>admin console, password: {SECRET}</body></html>".encode()
        calls = self.calls = [0]

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                calls[0] += 1
                self.rfile.read(int(self.headers.get("Content-Length") or 0))
                self.send_response(400)
                self.send_header("Content-Type", "text/html")
                self.send_header("Content-Length", str(len(page)))
                self.end_headers()
                self.wfile.write(page)

            def log_message(self, *_: object) -> None:
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = self.server.server_address[1]
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def test_an_internal_endpoint_is_refused_and_no_answer_is_reflected(
    api_client: k8s.ApiClient, control_plane: ControlPlane, namespace: str, tmp_path: Path
) -> None:
    """The operator POSTed to any endpointURL with its own AWS credentials, and the page
    it got back (a password in it) landed in Degraded and a Warning Event."""
    page = InternalPage()
    # The admin allowed this namespace one emulator on loopback, by that name only.
    policy = {"namespaces": {namespace: {"endpoints": ["127.0.0.1"], "allowHttp": True}}}
    process = OperatorProcess(
        control_plane.kubeconfig,
        namespace,
        tmp_path / "operator",
        env={"STREAMCONSUMER_AWS_ACCESS": json.dumps(policy)},
    ).start()
    try:
        consumers = StreamConsumers(api_client, namespace)
        consumers.create(consumer("sneaky", f"http://localhost:{page.port}/"))
        wait_for(
            lambda: (
                "endpoint host localhost is not one namespace"
                in degraded_message(consumers, "sneaky")
            ),
            60,
            "the endpoint refused",
        )
        assert page.calls[0] == 0, "nothing sent to a refused endpoint"

        consumers.create(consumer("allowed", f"http://127.0.0.1:{page.port}/"))
        wait_for(lambda: page.calls[0] > 0, 60, "the allowed endpoint called")
        wait_for(
            lambda: "not an AWS service's" in degraded_message(consumers, "allowed"),
            60,
            "the failed listing shown",
        )
        time.sleep(2)  # more listings, more chances to leak
        core = k8s.CoreV1Api(api_client)
        events = [e.message or "" for e in core.list_namespaced_event(namespace).items]
        shown = json.dumps([consumers.get(n).get("status") for n in ("sneaky", "allowed")])
        assert SECRET not in shown
        assert not [e for e in events if SECRET in e], events
        assert process.server is not None
        assert SECRET not in process.server.log_path.read_text(errors="replace")
    finally:
        process.stop()
        page.close()


def test_with_nothing_configured_the_operator_reads_no_tenants_stream(
    api_client: k8s.ApiClient,
    control_plane: ControlPlane,
    namespace: str,
    tmp_path: Path,
    kinesis: KinesisEmulator,
    stream_name: str,
) -> None:
    """Issue 40: with the chart's defaults (no awsAccess) the operator listed, as itself,
    whatever stream a StreamConsumer of any namespace named. Here its own environment
    names the endpoint (AWS_ENDPOINT_URL_KINESIS), as AWS's own is named on EKS: the spec
    names only the stream. Refused, the consumer says what an admin must set; set as
    said, the stream is read."""
    create_stream(kinesis.client, stream_name, 2)
    aimed = {"AWS_ENDPOINT_URL_KINESIS": kinesis.endpoint_url}
    tenant = consumer("tenant")
    tenant["spec"]["source"]["kinesis"] = {
        "streamName": stream_name,
        "region": kinesis.client.meta.region_name,
    }
    consumers = StreamConsumers(api_client, namespace)

    def run_operator(env: dict[str, str]) -> OperatorProcess:
        return OperatorProcess(
            control_plane.kubeconfig, namespace, tmp_path / "operator", env=env, aws_access=None
        ).start()

    def shards() -> int | None:
        return consumers.get("tenant").get("status", {}).get("shards")  # type: ignore[no-any-return]

    process = run_operator(aimed)
    try:
        consumers.create(tenant)
        refused = f"no AWS access is configured for namespace {namespace}"
        wait_for(
            lambda: refused in degraded_message(consumers, "tenant") or bool(shards()),
            60,
            "the refusal, or the stream listed",
        )
        time.sleep(3)  # listings every second: none may reach the stream
        assert not shards(), f"the operator listed, as itself, a stream nobody allowed: {shards()}"
        shown = degraded_message(consumers, "tenant")
        grant = {"namespaces": {namespace: {"streams": [stream_name]}}}
        assert f"awsAccess: {json.dumps(grant)}" in shown, shown
        assert "awsAccess.allowAllNamespaces: true" in shown
        events = k8s.CoreV1Api(api_client).list_namespaced_event(
            namespace, field_selector="reason=StreamUnavailable"
        )
        assert any(refused in (e.message or "") for e in events.items), events.items
        assert process.server is not None
        assert "Traceback" not in process.server.log_path.read_text(errors="replace")
    finally:
        process.stop()

    process = run_operator({**aimed, "STREAMCONSUMER_AWS_ACCESS": json.dumps(grant)})
    try:
        wait_for(lambda: shards() == 2, 60, "the stream listed once the admin allowed it")
        wait_cleared(consumers, "tenant", refused)
    finally:
        process.stop()


def test_unrestricted_workers_are_made_only_in_namespaces_the_admins_list(
    api_client: k8s.ApiClient, control_plane: ControlPlane, namespace: str, tmp_path: Path
) -> None:
    """`spec.pod.unrestricted` passes the CRD (the admission policy may be absent): the
    operator makes no pods for it outside its admins' list, and says why."""
    apps = k8s.AppsV1Api(api_client)
    node = unrestricted()

    def run_operator(allowed: list[str]) -> OperatorProcess:
        return operator_allowing(control_plane, namespace, tmp_path, allowed)

    consumers = StreamConsumers(api_client, namespace)
    process = run_operator(["another-namespace"])
    try:
        consumers.create(node)
        refused = f"spec.pod.unrestricted is not allowed in namespace {namespace}"
        wait_for(lambda: refused in degraded_message(consumers, "node"), 60, "Degraded says why")
        events = k8s.CoreV1Api(api_client).list_namespaced_event(
            namespace, field_selector="reason=PodPolicyRefused"
        )
        assert any(refused in (e.message or "") for e in events.items), events.items
        with pytest.raises(ApiException) as missing:
            apps.read_namespaced_deployment("node-workers", namespace)
        assert missing.value.status == 404
    finally:
        process.stop()

    process = run_operator([namespace])
    try:

        def made() -> bool:
            try:
                workers = apps.read_namespaced_deployment("node-workers", namespace)
            except ApiException:
                return False
            pod = workers.spec.template.spec
            return pod is not None and any(v.host_path is not None for v in pod.volumes or [])

        wait_for(made, 60, "the workers, with the node's socket, once the admins allow it")
        wait_cleared(consumers, "node", "unrestricted")
    finally:
        process.stop()


def test_unrestricted_workers_made_before_the_admins_withdrew_the_namespace_are_not_kept(
    api_client: k8s.ApiClient, control_plane: ControlPlane, namespace: str, tmp_path: Path
) -> None:
    """Found by review: once the namespace left the admins' list (an operator restarted
    with another `podPolicy.unrestrictedNamespaces`), the operator refused the spec and
    said "no worker pods are made", but left the Deployment it had made before: its
    ReplicaSet kept making pods with the node's socket mounted."""
    apps, core = k8s.AppsV1Api(api_client), k8s.CoreV1Api(api_client)
    node = unrestricted()

    def run_operator(allowed: list[str]) -> OperatorProcess:
        return operator_allowing(control_plane, namespace, tmp_path, allowed)

    def host_pods() -> list[str]:
        pods = core.list_namespaced_pod(namespace, label_selector="streamconsumer.io/consumer=node")
        return [
            str(p.metadata.name)
            for p in pods.items
            if p.metadata is not None
            and p.spec is not None
            and p.metadata.deletion_timestamp is None
            and any(v.host_path is not None for v in p.spec.volumes or [])
        ]

    consumers = StreamConsumers(api_client, namespace)
    process = run_operator([namespace])
    try:
        consumers.create(node)
        wait_for(lambda: bool(host_pods()), 60, "the allowed workers' pods")
    finally:
        process.stop()

    process = run_operator([])  # the admins withdrew the namespace
    try:
        refused = f"spec.pod.unrestricted is not allowed in namespace {namespace}"
        wait_for(lambda: refused in degraded_message(consumers, "node"), 60, "Degraded says why")
        for name in host_pods():  # a node drained, a pod evicted: the ReplicaSet replaces it
            with contextlib.suppress(NotFoundException):  # gone with its Deployment meanwhile
                core.delete_namespaced_pod(name, namespace)
        time.sleep(5)  # the ReplicaSet controller's resync is well under this
        assert host_pods() == [], "no worker pods are made, says the status"
        with pytest.raises(ApiException) as gone:
            apps.read_namespaced_deployment("node-workers", namespace)
        assert gone.value.status == 404
    finally:
        process.stop()


PREDATING: dict[
    str, tuple[Mapping[str, object], str]
] = {  # consumer: (a volume the previous release's CRD admitted, its path)
    "minted": (
        {"name": "kube", "projected": {"sources": [{"serviceAccountToken": {"path": "t"}}]}},
        "spec.pod.volumes[0].projected.sources[0].serviceAccountToken",
    ),
    "inline": (
        {"name": "vault", "csi": {"driver": "secrets-store.csi.k8s.io"}},
        "spec.pod.volumes[0].csi",
    ),
}


def with_volume(name: str, volume: Mapping[str, object]) -> dict[str, object]:
    manifest = consumer(name)
    spec = manifest["spec"]
    assert isinstance(spec, dict)
    spec["pod"] = {"volumes": [volume]}
    return manifest


def dry_run(plane: ControlPlane, namespace: str, manifest: dict[str, object]) -> str:
    """The apiserver's refusal of creating `manifest`, '' if it would be created."""
    created = plane.kubectl(
        "-n", namespace, "create", "--dry-run=server", "-f", "-", input=json.dumps(manifest)
    )
    return "" if created.returncode == 0 else created.stderr or "refused"


def test_no_workers_mint_a_token_or_mount_csi_from_an_object_admitted_before_the_rules(
    api_client: k8s.ApiClient, control_plane: ControlPlane, namespace: str, tmp_path: Path
) -> None:
    """Issue 40: the previous release's CRD admitted a projected serviceAccountToken
    and an inline CSI volume. Such an object keeps them through updates of other fields
    (CRD validation ratcheting): the operator makes no workers for it, says why, and
    makes them once the volume is gone."""
    apps = k8s.AppsV1Api(api_client)
    consumers = StreamConsumers(api_client, namespace)
    manifests = {name: with_volume(name, volume) for name, (volume, _) in PREDATING.items()}
    try:
        releases.apply_crd(control_plane, releases.PREVIOUS_CRD)
        for manifest in manifests.values():
            wait_for(
                lambda m=manifest: not dry_run(control_plane, namespace, m),  # type: ignore[misc]
                30,
                "the previous CRD in force",
            )
            consumers.create(manifest)
    finally:
        releases.apply_crd(control_plane, releases.CURRENT_CRD)
    wait_for(
        lambda: (
            "projected volumes may use only"
            in dry_run(control_plane, namespace, with_volume("again", PREDATING["minted"][0]))
        ),
        30,
        "this release's CRD in force",
    )
    consumers.patch("minted", {"spec": {"replicas": 2}})  # kept through an update

    process = OperatorProcess(control_plane.kubeconfig, namespace, tmp_path / "operator").start()
    try:
        for name, (_, path) in PREDATING.items():
            wait_for(
                lambda n=name, p=path: p in degraded_message(consumers, n),  # type: ignore[misc]
                60,
                f"Degraded of {name} says why",
            )
        events = k8s.CoreV1Api(api_client).list_namespaced_event(
            namespace, field_selector="reason=PodPolicyRefused"
        )
        told = " ".join(e.message or "" for e in events.items)
        assert all(path in told for _, path in PREDATING.values()), told
        assert "Traceback" not in process.log_path.read_text(errors="replace")
        for name in PREDATING:
            with pytest.raises(ApiException) as missing:
                apps.read_namespaced_deployment(f"{name}-workers", namespace)
            assert missing.value.status == 404, f"no workers of {name}"

        consumers.patch("minted", {"spec": {"pod": {"volumes": []}}})

        def made() -> bool:
            try:
                apps.read_namespaced_deployment("minted-workers", namespace)
            except ApiException:
                return False
            return True

        wait_for(made, 60, "the workers, once the token is gone")
        wait_cleared(consumers, "minted", "serviceAccountToken")
    finally:
        process.stop()


def test_the_autoscaler_never_scales_a_deployment_that_is_not_ours(
    api_client: k8s.ApiClient,
    namespace: str,
    operator: OperatorProcess,
    kinesis: KinesisEmulator,
    stream_name: str,
) -> None:
    """Found by review: the reconcile leaves an object of the workers' name that is not
    the StreamConsumer's untouched (NotOurs), but the lag autoscaler scaled
    `<name>-workers` by a forced server-side apply whoever's it was: a tenant who may
    only edit StreamConsumers could scale the admins' Deployment `db-workers` (to zero,
    or to a thousand) by naming a StreamConsumer `db`."""
    create_stream(kinesis.client, stream_name, 2)
    apps = k8s.AppsV1Api(api_client)
    apps.create_namespaced_deployment(namespace, deployment("db-workers", "db:1", 1, {"app": "db"}))
    consumers = StreamConsumers(api_client, namespace)
    db = consumer("db", kinesis.endpoint_url)
    db["spec"]["source"]["kinesis"]["streamName"] = stream_name
    db["spec"]["source"]["kinesis"]["region"] = kinesis.client.meta.region_name
    db["spec"]["autoscaling"] = {
        "enabled": True,
        "minReplicas": 3,
        "maxReplicas": 3,
        "scaleUpStabilizationSeconds": 0,
        "targetLagSeconds": 10,
    }
    consumers.create(db)
    wait_for(
        lambda: (
            "Deployment db-workers exists and is not" in degraded_message(consumers, "db")
            and consumers.get("db").get("status", {}).get("shards") == 2
        ),
        60,
        "the conflict shown, the shards listed",
    )
    time.sleep(5)  # several rounds of the loop, each free to scale
    scale = apps.read_namespaced_deployment_scale("db-workers", namespace)
    assert scale.spec is not None
    assert scale.spec.replicas == 1, "the admins' Deployment was scaled by a tenant's spec"
