"""What a user of the chart does, as the real-node tier and the container benchmark do
it: kubectl, the README's install block, the examples edited for their image, stream and
credentials."""

from __future__ import annotations

import json
import os
import re
import subprocess
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import yaml

from testbed.kinesis import KinesisEmulator
from testbed.node import Cluster

REPO = Path(__file__).resolve().parents[2]
EXAMPLES = REPO / "examples" / "clickstream"
INSTALL_MARKER = "# The real-node tier of `make test` runs this block as it is."
EMULATOR_MARKER = "# Against an emulator, the real-node tier of `make test` runs this block too."
RELEASE_NAMESPACE = "streamconsumer-system"
OPERATOR = "streamconsumer-operator"  # the chart's name for the release `streamconsumer`
WORKER_LABEL = "app.kubernetes.io/name=streamconsumer-worker"
# The emulator takes any credentials; boto3 needs some to sign with.
CREDENTIALS = {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing"}
CRASHES = 3  # restarts of a worker container that fail a test: it will not get better


class Kubectl:
    """The control plane's kubectl with its admin kubeconfig; a failure raises."""

    def __init__(self, cluster: Cluster) -> None:
        self.cluster = cluster

    def __call__(self, *args: str, input: str | None = None, timeout: float = 300) -> str:
        plane = self.cluster.plane
        result = subprocess.run(
            [str(plane.bin_dir / "kubectl"), f"--kubeconfig={plane.kubeconfig}", *args],
            input=input,
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )
        if result.returncode != 0:
            raise AssertionError(f"kubectl {' '.join(args)} failed:\n{result.stderr}")
        return result.stdout

    def pods(self, namespace: str, selector: str = WORKER_LABEL) -> list[dict[str, Any]]:
        """The pods; a container that keeps crashing fails the caller at once."""
        listed = json.loads(self("-n", namespace, "get", "pods", "-l", selector, "-o", "json"))
        for pod in listed["items"]:
            for status in pod.get("status", {}).get("containerStatuses", []):
                if status["restartCount"] >= CRASHES:
                    name = pod["metadata"]["name"]
                    last = status.get("lastState", {}).get("terminated", {})
                    raise AssertionError(
                        f"pod {name} crashed {status['restartCount']} times; last exit "
                        f"{last.get('exitCode')}: {last.get('message', '')}"
                    )
        return list(listed["items"])


def readme_block(marker: str = INSTALL_MARKER, readme: Path = REPO / "README.md") -> str:
    """The README's ```sh block that carries `marker` (the install commands by default)."""
    for block in re.findall(r"```sh\n(.*?)```", readme.read_text(), flags=re.DOTALL):
        if marker in block:
            return str(block)
    raise AssertionError(f"README.md has no sh block marked {marker!r}")


def helm_binary() -> Path:
    """helm: on PATH, or built from its Go module (tests/helm/build.sh)."""
    build = REPO / "tests" / "helm" / "build.sh"
    out = subprocess.run([str(build)], capture_output=True, text=True, check=True)
    return Path(out.stdout.strip().splitlines()[-1])


def install_operator(
    cluster: Cluster, helm: Path, kubectl: Kubectl, emulator: KinesisEmulator
) -> None:
    """Runs the README's install block as it is, with REGISTRY and TAG naming our operator
    image, kubectl and helm first on PATH; then its block that lets the operator reach
    `emulator` (EMULATOR_HOST)."""
    repository, tag = cluster.images["operator"].rsplit(":", 1)
    path = [str(cluster.plane.bin_dir), str(helm.parent), os.environ["PATH"]]
    env = {
        **os.environ,
        **CREDENTIALS,
        "REGISTRY": repository.rsplit("/", 1)[0],
        "TAG": tag,
        "KUBECONFIG": str(cluster.plane.kubeconfig),
        "PATH": os.pathsep.join(path),
        "EMULATOR_HOST": str(urlsplit(emulator.endpoint_url).hostname),
    }
    for marker in (INSTALL_MARKER, EMULATOR_MARKER):
        result = subprocess.run(
            ["bash", "-euo", "pipefail", "-c", readme_block(marker)],
            cwd=REPO,
            env=env,
            capture_output=True,
            text=True,
            timeout=300,
            check=False,
        )
        if result.returncode != 0:
            pods = kubectl("get", "pods", "-A", "-o", "wide")
            raise AssertionError(f"the README's block {marker!r} failed:\n{result.stderr}\n{pods}")


def consumer_namespace(kubectl: Kubectl, name: str) -> None:
    """A namespace with the credentials Secret the example's envFrom comment suggests."""
    kubectl("create", "namespace", name)
    literals = [f"--from-literal={key}={value}" for key, value in CREDENTIALS.items()]
    kubectl("-n", name, "create", "secret", "generic", "aws-credentials", *literals)


def edited_example(
    path: Path, image: str, stream: str, emulator: KinesisEmulator, env: dict[str, str]
) -> dict[str, Any]:
    """An example StreamConsumer as a user edits it: their image, their stream, a
    credentials Secret instead of IRSA, and `env` set (added or replaced)."""
    manifest: dict[str, Any] = yaml.safe_load(path.read_text())
    spec = manifest["spec"]
    spec["source"] = {
        "kinesis": {
            "streamName": stream,
            "region": "us-east-1",
            "endpointURL": emulator.endpoint_url,
        }
    }
    processor = spec["processor"]
    processor["image"] = image
    processor.pop("serviceAccountAnnotations", None)
    processor["envFrom"] = [{"secretRef": {"name": "aws-credentials"}}]
    current = {item["name"]: item["value"] for item in processor.get("env", [])}
    processor["env"] = [{"name": k, "value": v} for k, v in {**current, **env}.items()]
    return manifest
