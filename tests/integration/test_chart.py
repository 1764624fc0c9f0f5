"""The Helm chart lints, renders, and its manifests are accepted by the real apiserver
(server-side dry run); so are the examples and the kustomize overlay."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import yaml
from unit.test_docs import anchors

from streamconsumer.controller.aws.access import AccessPolicy
from streamconsumer.controller.election.leadership import LEADER_LABEL
from streamconsumer.controller.worker_api.listeners import LIVENESS_PATH, READINESS_PATH
from testbed.charts import DASHBOARD, KUBE_VERSION
from testbed.controlplane import ControlPlane

REPO = Path(__file__).resolve().parents[2]
CHART = REPO / "charts" / "streamconsumer"
APP_VERSION = yaml.safe_load((CHART / "Chart.yaml").read_text())["appVersion"]


def run(*argv: str | Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(a) for a in argv], capture_output=True, text=True, timeout=120)


def template(helm: Path, *flags: str) -> subprocess.CompletedProcess[str]:
    return run(helm, "template", "sc", CHART, "--kube-version", KUBE_VERSION, *flags)


def test_chart_lints(helm: Path) -> None:
    result = run(helm, "lint", "--strict", CHART)
    assert result.returncode == 0, result.stdout + result.stderr


def test_chart_renders_without_a_kube_version(helm: Path) -> None:
    """Offline, helm assumes the Kubernetes its own modules are built for (its Makefile's
    linker flags, tests/helm/build.sh); without them it assumes v1.20, which the chart's
    kubeVersion refuses, as `helm template` in a GitOps pipeline would."""
    result = run(helm, "template", "sc", CHART)
    assert result.returncode == 0, result.stderr


def test_rendered_chart_applies_on_the_real_apiserver(
    helm: Path, control_plane: ControlPlane, namespace: str
) -> None:
    rendered = template(helm, "--namespace", namespace, "--include-crds")
    assert rendered.returncode == 0, rendered.stderr
    kinds = {doc["kind"] for doc in yaml.safe_load_all(rendered.stdout) if doc}
    assert kinds == {
        "CustomResourceDefinition",
        "ServiceAccount",
        "ClusterRole",
        "ClusterRoleBinding",
        "Role",  # the Lease, the leader label, the CA Secret: in the release namespace only
        "RoleBinding",
        "Deployment",
        "Service",
        "NetworkPolicy",
        "PodDisruptionBudget",
        "ValidatingAdmissionPolicy",  # no confused deputy (docs/security.md)
        "ValidatingAdmissionPolicyBinding",
    }
    applied = control_plane.kubectl(
        "apply", "--dry-run=server", "-n", namespace, "-f", "-", input=rendered.stdout
    )
    assert applied.returncode == 0, applied.stderr


def test_values_schema_refuses_bad_values(helm: Path) -> None:
    for flag, field in (
        ("replicas=-1", "replicas"),
        ("leaderElection.retrySeconds=0", "retrySeconds"),
        ("api.port=80", "port"),
        ("api.maxConnectionsPerClient=0", "maxConnectionsPerClient"),
        ("probes.port=80", "port"),
        ("logLevel=LOUD", "logLevel"),
        ("tls.mode=off", "mode"),
    ):
        result = template(helm, "--set", flag)
        assert result.returncode != 0, flag
        assert field in result.stderr, result.stderr


def test_the_worker_api_follows_the_leader_and_upgrades_roll(helm: Path) -> None:
    docs = [d for d in yaml.safe_load_all(template(helm).stdout) if d]
    by_kind = {d["kind"]: d for d in docs}
    assert by_kind["Service"]["spec"]["selector"][LEADER_LABEL] == "true"
    deployment = by_kind["Deployment"]["spec"]
    assert deployment["replicas"] == 2
    assert deployment["strategy"]["rollingUpdate"] == {"maxSurge": 1, "maxUnavailable": 0}
    pod_labels = deployment["template"]["metadata"]["labels"]
    assert by_kind["PodDisruptionBudget"]["spec"]["selector"]["matchLabels"].items() <= (
        pod_labels.items()
    )
    env = {e["name"]: e for e in deployment["template"]["spec"]["containers"][0]["env"]}
    assert env["STREAMCONSUMER_POD_NAME"]["valueFrom"]["fieldRef"]["fieldPath"] == "metadata.name"
    single = template(helm, "--set", "replicas=1").stdout
    assert "PodDisruptionBudget" not in single, "a PDB on one replica would block every drain"


def test_namespaced_install_renders_namespace_flags(helm: Path) -> None:
    result = template(helm, "--set", "watchNamespaces={team-a,team-b}")
    assert result.returncode == 0, result.stderr
    assert "--namespace=team-a" in result.stdout
    assert "--all-namespaces" not in result.stdout


def test_hpa_example_applies_on_the_real_apiserver(
    control_plane: ControlPlane, namespace: str
) -> None:
    # (The KEDA example needs KEDA's CRDs, which this control plane does not have; its
    # query is checked against our metric names in tests/unit/test_docs_examples.py.)
    hpa = REPO / "docs" / "autoscaling" / "hpa.yaml"
    applied = control_plane.kubectl("apply", "--dry-run=server", "-n", namespace, "-f", str(hpa))
    assert applied.returncode == 0, applied.stderr


def test_monitors_are_optional_and_scrape_every_replicas_metrics_port(helm: Path) -> None:
    kinds = {d["kind"] for d in yaml.safe_load_all(template(helm).stdout) if d}
    assert not kinds & {"ServiceMonitor", "PodMonitor", "PrometheusRule"}, "off by default"
    rendered = template(
        helm,
        *("--set", "serviceMonitor.enabled=true", "--set", "serviceMonitor.labels.release=prom"),
        *("--set", "podMonitor.enabled=true", "--set", "prometheusRule.enabled=true"),
    )
    assert rendered.returncode == 0, rendered.stderr
    docs = [d for d in yaml.safe_load_all(rendered.stdout) if d]
    monitor = next(d for d in docs if d["kind"] == "ServiceMonitor")
    operator = next(d for d in docs if d["kind"] == "Deployment")
    selected = [
        d
        for d in docs
        if d["kind"] == "Service"
        and monitor["spec"]["selector"]["matchLabels"].items() <= d["metadata"]["labels"].items()
    ]
    assert len(selected) == 1, "the metrics Service only, not the leader-only API Service"
    service = selected[0]["spec"]
    # Every replica: the selector has no leader label.
    pod_labels = operator["spec"]["template"]["metadata"]["labels"]
    assert service["selector"].items() <= pod_labels.items()
    assert LEADER_LABEL not in service["selector"]
    endpoint = monitor["spec"]["endpoints"][0]
    assert endpoint["port"] == "metrics" == service["ports"][0]["name"]
    assert endpoint["honorLabels"] is True, "else namespace becomes exported_namespace"
    assert endpoint["scheme"] == "http"
    container = operator["spec"]["template"]["spec"]["containers"][0]
    assert {"name": "metrics", "containerPort": 9090} in container["ports"]
    assert env_of(container)["STREAMCONSUMER_METRICS_PORT"] == "9090"
    assert monitor["metadata"]["labels"]["release"] == "prom"

    workers = next(d for d in docs if d["kind"] == "PodMonitor")["spec"]
    assert workers["namespaceSelector"] == {"any": True}
    assert workers["podMetricsEndpoints"][0]["port"] == "metrics"
    rules = next(d for d in docs if d["kind"] == "PrometheusRule")["spec"]["groups"][0]["rules"]
    assert {r["alert"] for r in rules} >= {
        "StreamConsumerNoLeader",
        "StreamConsumerShardBlocked",
        "StreamConsumerShardStuck",
        "StreamConsumerLagGrowing",
        "StreamConsumerStatusWritesFailing",
        "StreamConsumerRecordsDeadLettered",
    }


def test_the_dashboard_ships_as_a_configmap_for_grafanas_sidecar(helm: Path) -> None:
    assert not [d for d in rendered_docs(helm) if d["kind"] == "ConfigMap"], "off by default"
    docs = rendered_docs(
        helm,
        *("--set", "grafanaDashboard.enabled=true", "--set", "grafanaDashboard.namespace=mon"),
        *("--set", "grafanaDashboard.annotations.grafana_folder=Streams"),
    )
    found = next(d for d in docs if d["kind"] == "ConfigMap")
    assert found["metadata"]["namespace"] == "mon", "where the sidecar looks"
    assert found["metadata"]["labels"]["grafana_dashboard"] == "1"
    assert found["metadata"]["annotations"] == {"grafana_folder": "Streams"}
    (text,) = found["data"].values()
    assert json.loads(text) == json.loads(DASHBOARD.read_text()), "the dashboard, whole"


def test_every_alert_says_what_it_means_and_links_its_runbook(helm: Path) -> None:
    """An on-call engineer gets a description and a runbook_url with each alert: a section
    of docs/troubleshooting.md (of this version, or the copy `prometheusRule.runbookURL`
    names) that exists."""
    guide = anchors((REPO / "docs" / "troubleshooting.md").read_text())
    for flags, base in (
        ((), f"https://github.com/streamconsumer/streamconsumer/blob/v{APP_VERSION}/docs/"),
        (
            ("--set", "prometheusRule.runbookURL=https://wiki.example/sc.md"),
            "https://wiki.example/",
        ),
    ):
        docs = rendered_docs(helm, "--set", "prometheusRule.enabled=true", *flags)
        rule = next(d for d in docs if d["kind"] == "PrometheusRule")
        alerts = [r for g in rule["spec"]["groups"] for r in g["rules"] if "alert" in r]
        assert len(alerts) == 6
        for alert in alerts:
            annotations = alert["annotations"]
            assert annotations.get("summary"), alert["alert"]
            assert annotations.get("description"), alert["alert"]
            page, _, anchor = annotations["runbook_url"].partition("#")
            assert page.startswith(base), (alert["alert"], page)
            assert anchor in guide, (alert["alert"], anchor)


def test_network_policy_opens_metrics_to_the_scrapers_only(helm: Path) -> None:
    def ingress(*flags: str) -> list[dict[str, Any]]:
        rendered = template(helm, *flags)
        assert rendered.returncode == 0, rendered.stderr
        policy = next(
            d for d in yaml.safe_load_all(rendered.stdout) if d and d["kind"] == "NetworkPolicy"
        )
        return list(policy["spec"]["ingress"])

    api, metrics = ingress()
    assert api["ports"] == [{"port": "api", "protocol": "TCP"}]
    assert metrics["ports"] == [{"port": "metrics", "protocol": "TCP"}]
    assert metrics["from"] == [
        {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "monitoring"}}}
    ]
    [only_api] = ingress("--set", "metrics.scrapers=null")
    assert only_api["ports"] == [{"port": "api", "protocol": "TCP"}]


def test_examples_apply_on_the_real_apiserver(control_plane: ControlPlane, namespace: str) -> None:
    example = REPO / "examples" / "clickstream" / "streamconsumer.yaml"
    applied = control_plane.kubectl(
        "apply", "--dry-run=server", "-n", namespace, "-f", str(example)
    )
    assert applied.returncode == 0, applied.stderr
    overlay = control_plane.kubectl("kustomize", str(REPO / "examples/kustomize/production"))
    assert overlay.returncode == 0, overlay.stderr
    assert "replicas: 4" in overlay.stdout
    rendered = overlay.stdout.replace("namespace: clickstream", f"namespace: {namespace}")
    applied = control_plane.kubectl("apply", "--dry-run=server", "-f", "-", input=rendered)
    assert applied.returncode == 0, applied.stderr


def rendered_docs(helm: Path, *flags: str) -> list[dict[str, Any]]:
    result = template(helm, "--namespace", "sys", *flags)
    assert result.returncode == 0, result.stderr
    return [d for d in yaml.safe_load_all(result.stdout) if d]


def operator_container(docs: list[dict[str, Any]]) -> dict[str, Any]:
    deployment = next(d for d in docs if d["kind"] == "Deployment")
    container: dict[str, Any] = deployment["spec"]["template"]["spec"]["containers"][0]
    return container


def env_of(container: dict[str, Any]) -> dict[str, Any]:
    return {e["name"]: e.get("value", e.get("valueFrom")) for e in container["env"]}


def grants_secrets(role: dict[str, Any]) -> bool:
    return any("secrets" in rule["resources"] for rule in role["rules"])


def test_tls_is_the_default_with_a_managed_ca_kept_in_the_release_namespace(helm: Path) -> None:
    docs = rendered_docs(helm)
    container = operator_container(docs)
    env = env_of(container)
    assert env["STREAMCONSUMER_API_URL"].startswith("https://$(SC_OPERATOR_SERVICE_HOST):")
    assert env["STREAMCONSUMER_TLS_SANS"] == '["$(SC_OPERATOR_SERVICE_HOST)"]', "the cluster IP"
    assert env["STREAMCONSUMER_SERVICE_NAME"] == "sc-operator"
    assert env["STREAMCONSUMER_NAMESPACE"] == {"fieldRef": {"fieldPath": "metadata.namespace"}}
    # Their own plain-HTTP listener, never subject to the workers' connection caps; each
    # asks its own question (listeners.py): the loop answers, the worker API accepts.
    for probe, path in (
        (container["livenessProbe"], LIVENESS_PATH),
        (container["readinessProbe"], READINESS_PATH),
    ):
        assert probe["httpGet"] == {"path": path, "port": "probes", "scheme": "HTTP"}
    assert container["livenessProbe"] != container["readinessProbe"]
    assert {"name": "probes", "containerPort": 8081} in container["ports"]
    assert env["STREAMCONSUMER_PROBE_PORT"] == "8081"
    assert env["STREAMCONSUMER_API_MAX_CONNECTIONS"] == "4096"
    assert env["STREAMCONSUMER_API_MAX_CONNECTIONS_PER_CLIENT"] == "64"
    role = next(d for d in docs if d["kind"] == "Role" and grants_secrets(d))
    assert role["metadata"]["namespace"] == "sys"
    get = next(r for r in role["rules"] if r["verbs"] == ["get"])
    assert get["resourceNames"] == [env["STREAMCONSUMER_TLS_CA_SECRET"]] == ["sc-operator-ca"]
    cluster_rules = [r for d in docs if d["kind"] == "ClusterRole" for r in d["rules"]]
    assert all("secrets" not in r["resources"] for r in cluster_rules), "no Secret cluster-wide"
    assert any("configmaps" in r["resources"] for r in cluster_rules), "workers' CA bundle"


def test_tls_disabled_is_plain_http(helm: Path) -> None:
    docs = rendered_docs(helm, "--set", "tls.mode=disabled")
    container = operator_container(docs)
    assert env_of(container)["STREAMCONSUMER_API_URL"].startswith("http://")
    assert container["readinessProbe"]["httpGet"]["port"] == "probes"
    assert not any(d["kind"] == "Role" and grants_secrets(d) for d in docs)


def test_cert_manager_mode_renders_its_issuers_and_mounts_the_certificate(helm: Path) -> None:
    """Render-tested only: this control plane has no cert-manager."""
    docs = rendered_docs(
        helm, "--set", "tls.mode=certManager", "--set", "api.url=https://ops.example:8443"
    )
    certificates = {d["metadata"]["name"]: d for d in docs if d["kind"] == "Certificate"}
    issuers = {d["metadata"]["name"]: d for d in docs if d["kind"] == "Issuer"}
    assert certificates["sc-operator-ca"]["spec"]["isCA"] is True
    assert issuers["sc-operator-ca"]["spec"]["ca"]["secretName"] == "sc-operator-ca"
    serving = certificates["sc-operator-tls"]["spec"]
    assert serving["issuerRef"]["name"] == "sc-operator-ca"
    assert "sc-operator.sys.svc" in serving["dnsNames"]
    assert "ops.example" in serving["dnsNames"], "the host workers are given"
    container = operator_container(docs)
    cert_dir = env_of(container)["STREAMCONSUMER_TLS_CERT_DIR"]
    mount = next(m for m in container["volumeMounts"] if m["mountPath"] == cert_dir)
    deployment = next(d for d in docs if d["kind"] == "Deployment")
    volume = next(
        v for v in deployment["spec"]["template"]["spec"]["volumes"] if v["name"] == mount["name"]
    )
    assert volume["secret"]["secretName"] == serving["secretName"]
    assert not any(d["kind"] == "Role" and grants_secrets(d) for d in docs), (
        "no CA of the operator's own"
    )
    default_url = env_of(operator_container(rendered_docs(helm, "--set", "tls.mode=certManager")))
    assert default_url["STREAMCONSUMER_API_URL"] == "https://sc-operator.sys.svc:8080"


def test_aws_access_reaches_the_operator_as_it_reads_it(helm: Path) -> None:
    """`awsAccess` (docs/security.md#aws-access) becomes the JSON the operator parses;
    a misspelt field is refused at install, not ignored."""
    role = {"roleArn": "arn:aws:iam::123456789012:role/team-a", "externalId": "team-a-7f3e"}
    policy = {"namespaces": {"team-a": {"streams": ["team-a-*"], "allowHttp": True, **role}}}
    env = env_of(
        operator_container(rendered_docs(helm, "--set-json", f"awsAccess={json.dumps(policy)}"))
    )
    read = AccessPolicy.model_validate_json(env["STREAMCONSUMER_AWS_ACCESS"])
    assert read == AccessPolicy.model_validate(policy)
    default = env_of(operator_container(rendered_docs(helm)))
    assert "STREAMCONSUMER_AWS_ACCESS" not in default, "no awsAccess: the operator's default"
    assert AccessPolicy().access("any") is None, "which allows no namespace anything"
    refused = template(helm, "--set-json", 'awsAccess={"default":{"endpoint":["x"]}}')
    assert refused.returncode != 0
    assert "endpoint" in refused.stderr
    # A single-tenant cluster's one value (docs/security.md#aws-access).
    everyone = rendered_docs(helm, "--set", "awsAccess.allowAllNamespaces=true")
    opened = env_of(operator_container(everyone))["STREAMCONSUMER_AWS_ACCESS"]
    assert AccessPolicy.model_validate_json(opened) == AccessPolicy(allow_all_namespaces=True)
    both = template(
        helm, "--set", "awsAccess.allowAllNamespaces=true", "--set-json", "awsAccess.default={}"
    )
    assert both.returncode != 0, "allowAllNamespaces and a default: which one holds?"
    assert "default" in both.stderr
    # Each release's workers' tokens are for that release only.
    assert env["STREAMCONSUMER_TOKEN_AUDIENCE"] == "streamconsumer.io/sys/sc-operator"


def documents(rendered: str) -> dict[str, dict[str, Any]]:
    return {doc["kind"]: doc for doc in yaml.safe_load_all(rendered) if doc}


def test_the_crd_is_a_template_helm_upgrades_and_uninstall_keeps(helm: Path) -> None:
    """Issue 25: the CRD shipped only in the chart's crds/ folder, which `helm upgrade`
    never updates. As a template it is upgraded with the release, and kept on uninstall
    (deleting it would delete every StreamConsumer and its checkpoints)."""
    assert not (CHART / "crds").exists(), "helm would install a crds/ copy as well"
    rendered = template(helm)  # no --include-crds: an upgrade renders templates only
    assert rendered.returncode == 0, rendered.stderr
    crd = documents(rendered.stdout)["CustomResourceDefinition"]
    assert crd["metadata"]["annotations"] == {"helm.sh/resource-policy": "keep"}
    own = template(helm, "--set", "crds.install=false")
    assert "CustomResourceDefinition" not in documents(own.stdout)


def test_the_chart_takes_what_platform_teams_set(helm: Path) -> None:
    """Issue 25: the chart refused global, imagePullSecrets, fullnameOverride,
    podAnnotations and image.digest, and put both replicas wherever they fell."""
    digest = "sha256:" + "a" * 64
    rendered = template(
        helm,
        "--set", "global.registry=r.example",
        "--set", "imagePullSecrets[0].name=regcred",
        "--set", "fullnameOverride=streams",
        "--set", "podAnnotations.backup=skip",
        "--set", f"image.digest={digest}",
    )  # fmt: skip
    assert rendered.returncode == 0, rendered.stderr
    deployment = documents(rendered.stdout)["Deployment"]
    pod = deployment["spec"]["template"]
    assert deployment["metadata"]["name"] == "streams"
    assert pod["metadata"]["annotations"] == {"backup": "skip"}
    assert pod["spec"]["imagePullSecrets"] == [{"name": "regcred"}]
    assert pod["spec"]["containers"][0]["image"] == f"ghcr.io/streamconsumer/operator@{digest}"
    spread = pod["spec"]["topologySpreadConstraints"]
    assert spread[0]["topologyKey"] == "kubernetes.io/hostname"
    assert (
        spread[0]["labelSelector"]["matchLabels"] == deployment["spec"]["selector"]["matchLabels"]
    )
    bad = template(helm, "--set", "image.digest=latest")
    assert bad.returncode != 0, "a digest is a sha256"


def test_the_install_notes_say_how_to_check_it(helm: Path, control_plane: ControlPlane) -> None:
    # The session's CRD was applied without helm: an install may not take it over (see
    # docs/upgrades.md for adopting one), so this one leaves the CRD out.
    notes = run(
        helm, "install", "sc", CHART, "--dry-run=client", "--set", "crds.install=false",
        "--kubeconfig", control_plane.kubeconfig,
    )  # fmt: skip
    assert notes.returncode == 0, notes.stderr
    assert "kubectl get stc --all-namespaces" in notes.stdout, notes.stdout
