"""A local kubelet for tests: runs the worker Deployment's Pods as local processes.

It watches Pods on the real apiserver, starts each as a process with the pod's command
and environment (field references and $(VAR) expansion resolved, the projected
ServiceAccount token minted by TokenRequest bound to the Pod and written to a file),
marks it Running and Ready, and stops it (SIGTERM, then SIGKILL after the grace period)
when the Pod is deleted. A process that dies on its own marks its Pod Failed, so the
ReplicaSet replaces it — a lost pod, as on a real node. Scaling, kills and rollouts are
then real API operations.

Like a real kubelet it binds each Pod to its Node (`NODE`, registered at start), so a
deleted Pod is deleted gracefully: it stays, with a deletionTimestamp, while its process
drains (and its bound token stays valid), and the kubelet removes it once the process
has exited. (An unbound Pod is deleted at once, and its token refused with it.)

Like a real kubelet it converges rather than trusts every event: it lists, then watches
from the list's resourceVersion (relisting when that is too old), and reconciles its
processes against a fresh list every few seconds, so a pod deleted while no watch was
looking is still stopped."""

from __future__ import annotations

import contextlib
import datetime
import logging
import os
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kubernetes import client as k8s
from kubernetes import watch
from kubernetes.client.exceptions import ApiException

log = logging.getLogger(__name__)
Pod = dict[str, Any]
RESYNC_SECONDS = 3.0
NODE = "local-kubelet"  # the Node every pod of a LocalKubelet is bound to


@dataclass
class RunningPod:
    name: str
    uid: str
    process: subprocess.Popen[bytes]
    grace: float
    stopping: bool = False


class LocalKubelet:
    def __init__(
        self,
        api_client: k8s.ApiClient,
        namespace: str,
        label_selector: str,
        workdir: Path,
        extra_env: dict[str, str] | None = None,
        pod_env: Callable[[str], dict[str, str]] | None = None,
    ) -> None:
        self._api_client = api_client
        self._core = k8s.CoreV1Api(api_client)
        self.namespace = namespace
        self.label_selector = label_selector
        self.workdir = workdir
        self.extra_env = extra_env or {}
        self.pod_env = pod_env
        self.pods: dict[str, RunningPod] = {}
        # A pod started from now on is Ready this long after it runs (a container that
        # takes time to start): 0, at once. A rollout is then seen under way, as on a node.
        self.ready_after_seconds = 0.0
        # Pods whose process ended on its own: exit status, and when it was seen (≤0.2 s late).
        self.exits: dict[str, tuple[int, float]] = {}
        self._lock = threading.Lock()
        self._stopped = threading.Event()
        self._threads = [
            threading.Thread(target=self._watch, name="kubelet-watch", daemon=True),
            threading.Thread(target=self._monitor, name="kubelet-monitor", daemon=True),
            threading.Thread(target=self._resync, name="kubelet-resync", daemon=True),
        ]

    def start(self) -> LocalKubelet:
        node = k8s.V1Node(metadata=k8s.V1ObjectMeta(name=NODE))
        try:
            self._core.create_node(node)
        except ApiException as error:
            if error.status != 409:  # registered by another test's kubelet
                raise
        for thread in self._threads:
            thread.start()
        return self

    def stop(self) -> None:
        self._stopped.set()
        for thread in self._threads:
            thread.join(10)
        with self._lock:
            pods = list(self.pods.values())
        for pod in pods:
            self._terminate(pod, grace=5.0)

    def running(self) -> list[str]:
        with self._lock:
            return sorted(n for n, p in self.pods.items() if p.process.poll() is None)

    def kill(self, pod_name: str, sig: int = signal.SIGKILL) -> None:
        """Kills a pod's process behind Kubernetes' back (a crash)."""
        with self._lock:
            pod = self.pods[pod_name]
        os.killpg(pod.process.pid, sig)

    # --- watching -----------------------------------------------------------------

    def _list(self) -> tuple[list[Pod], str]:
        listed = self._core.list_namespaced_pod(self.namespace, label_selector=self.label_selector)
        assert listed.metadata is not None
        assert listed.metadata.resource_version is not None
        pods = [self._api_client.sanitize_for_serialization(p) for p in listed.items]
        return pods, listed.metadata.resource_version

    def _watch(self) -> None:
        """List, then watch from there; list again when the watch's version is too old."""
        version: str | None = None
        while not self._stopped.is_set():
            stream = watch.Watch()
            try:
                if version is None:
                    pods, version = self._list()
                    self._reconcile(pods)
                for event in stream.stream(
                    self._core.list_namespaced_pod,
                    self.namespace,
                    label_selector=self.label_selector,
                    resource_version=version,
                    allow_watch_bookmarks=True,
                    timeout_seconds=30,
                ):
                    if self._stopped.is_set():
                        break
                    if event["type"] == "ERROR":  # a Status, e.g. 410 Gone: list again
                        version = None
                        break
                    # Plain camelCase dicts, as in a manifest (the client hands some
                    # events over undecoded, already in that form).
                    raw = event["object"]
                    pod: Pod = (
                        raw
                        if isinstance(raw, dict)
                        else self._api_client.sanitize_for_serialization(raw)
                    )
                    version = pod.get("metadata", {}).get("resourceVersion") or version
                    if event["type"] == "BOOKMARK":
                        continue
                    if event["type"] == "DELETED" or pod["metadata"].get("deletionTimestamp"):
                        self._deleted(pod)
                    else:
                        self._seen(pod)
            except ApiException as error:
                if error.status != 410:
                    self._retry_later("kubelet watch failed")
                version = None  # 410 Gone: our version is compacted away; list again
            except Exception:  # the watch reconnects; a test's teardown may race it
                self._retry_later("kubelet watch failed")
            finally:
                stream.stop()

    def _resync(self) -> None:
        """Reconcile with a fresh list now and then, whatever the watch saw."""
        while not self._stopped.wait(RESYNC_SECONDS):
            try:
                self._reconcile(self._list()[0])
            except Exception:
                self._retry_later("kubelet resync failed")

    def _reconcile(self, pods: list[Pod]) -> None:
        wanted = {
            p["metadata"]["name"]: p
            for p in pods
            if not p["metadata"].get("deletionTimestamp")
            and p.get("status", {}).get("phase") not in ("Failed", "Succeeded")
        }
        with self._lock:
            running = dict(self.pods)
        for name, local in running.items():
            pod = wanted.get(name)
            if pod is None or pod["metadata"]["uid"] != local.uid:
                self._deleted({"metadata": {"name": name}})
        for pod in wanted.values():
            self._seen(pod)

    def _retry_later(self, what: str) -> None:
        if not self._stopped.is_set():
            log.exception(what + "; retrying")
            time.sleep(0.5)

    def _seen(self, pod: Pod) -> None:
        name = pod["metadata"]["name"]
        with self._lock:
            if self._stopped.is_set():
                return
            if name in self.pods or pod.get("status", {}).get("phase") in ("Failed", "Succeeded"):
                return
            if not pod["spec"].get("nodeName"):
                self._bind(name)
            self.pods[name] = self._launch(pod)
            delay = self.ready_after_seconds
        self._set_phase(name, "Running", ready=not delay)
        if delay:
            timer = threading.Timer(delay, self._ready, (name, self.pods[name]))
            timer.daemon = True
            timer.start()

    def _ready(self, name: str, started: RunningPod) -> None:
        with self._lock:
            if self._stopped.is_set() or self.pods.get(name) is not started:
                return  # stopped or deleted meanwhile
        self._set_phase(name, "Running", ready=True)

    def _deleted(self, pod: Pod) -> None:
        with self._lock:
            running = self.pods.get(pod["metadata"]["name"])
        if running is not None and not running.stopping:
            threading.Thread(target=self._terminate, args=(running,), daemon=True).start()

    def _bind(self, name: str) -> None:
        """Schedules the pod on our node, as the scheduler would."""
        binding = k8s.V1Binding(
            metadata=k8s.V1ObjectMeta(name=name),
            target=k8s.V1ObjectReference(api_version="v1", kind="Node", name=NODE),
        )
        # The generated client cannot read the Status this call answers with.
        self._core.create_namespaced_pod_binding(
            name, self.namespace, binding, _preload_content=False
        )

    def _terminate(self, pod: RunningPod, grace: float | None = None) -> None:
        """As a container runtime stops a container: SIGTERM to its main process alone
        (what else runs is the main process' to stop: a supervisor of worker processes
        passes it on), then SIGKILL to whatever is left once it ends or the grace is over."""
        pod.stopping = True
        if pod.process.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                pod.process.send_signal(signal.SIGTERM)
            with contextlib.suppress(subprocess.TimeoutExpired):
                pod.process.wait(pod.grace if grace is None else grace)
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(pod.process.pid, signal.SIGKILL)
        pod.process.wait()
        # The process is gone: the Pod object may go too (a no-op unless it was deleted).
        self._finish_deletion(pod.name)

    def _finish_deletion(self, name: str) -> None:
        try:
            current = self._core.read_namespaced_pod(name, self.namespace)
        except ApiException:
            return
        if current.metadata is not None and current.metadata.deletion_timestamp is not None:
            with contextlib.suppress(ApiException):
                self._core.delete_namespaced_pod(name, self.namespace, grace_period_seconds=0)

    def _monitor(self) -> None:
        while not self._stopped.wait(0.2):
            with self._lock:
                died = [
                    p for p in self.pods.values() if not p.stopping and p.process.poll() is not None
                ]
                for pod in died:
                    pod.stopping = True
            for pod in died:
                log.info("pod %s exited with %s", pod.name, pod.process.returncode)
                self.exits[pod.name] = (pod.process.returncode, time.time())
                with contextlib.suppress(Exception):
                    self._set_phase(pod.name, "Failed", ready=False)

    def _set_phase(self, name: str, phase: str, ready: bool) -> None:
        now = datetime.datetime.now(datetime.UTC).isoformat()
        status = {
            "phase": phase,
            "podIP": "127.0.0.1",
            "startTime": now,
            "conditions": [
                {"type": "Ready", "status": str(ready), "lastTransitionTime": now},
                {"type": "ContainersReady", "status": str(ready), "lastTransitionTime": now},
            ],
        }
        self._core.patch_namespaced_pod_status(name, self.namespace, {"status": status})

    # --- launching ----------------------------------------------------------------

    def _launch(self, pod: Pod) -> RunningPod:
        spec = pod["spec"]
        container = spec["containers"][0]
        name = pod["metadata"]["name"]
        pod_dir = self.workdir / name
        pod_dir.mkdir(parents=True, exist_ok=True)
        mounts = self._project_volumes(pod, pod_dir)
        env = {**self._base_env(), **self.extra_env}
        for var in container.get("env", []):
            env[var["name"]] = self._value(var, pod, env, mounts)
        if self.pod_env is not None:
            env.update(self.pod_env(name))
        command = [sys.executable if c == "python" else c for c in container.get("command", [])]
        command += list(container.get("args", []))
        log_file = (pod_dir / "output.log").open("ab")
        process = subprocess.Popen(
            command,
            env=env,
            stdout=log_file,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )
        log_file.close()
        return RunningPod(
            name=name,
            uid=pod["metadata"]["uid"],
            process=process,
            grace=float(spec.get("terminationGracePeriodSeconds", 30)),
        )

    @staticmethod
    def _base_env() -> dict[str, str]:
        keep = ("PATH", "HOME", "LANG", "PYTHONPATH", "VIRTUAL_ENV", "TMPDIR")
        scratch = ("SPARK_LOCAL_DIRS", "PYSPARK_SUBMIT_ARGS")  # tests/conftest.py
        return {k: os.environ[k] for k in keep + scratch if k in os.environ}

    def _project_volumes(self, pod: Pod, pod_dir: Path) -> dict[str, str]:
        """Writes projected ServiceAccount tokens and ConfigMaps' keys; returns mount
        path -> local directory."""
        metadata, spec = pod["metadata"], pod["spec"]
        local: dict[str, str] = {}
        for volume in spec.get("volumes", []):
            if "projected" not in volume and "configMap" not in volume:
                continue
            directory = pod_dir / volume["name"]
            directory.mkdir(exist_ok=True)
            if "configMap" in volume:  # as a kubelet does: one file per key
                config_map = self._core.read_namespaced_config_map(
                    volume["configMap"]["name"], self.namespace
                )
                for key, value in (config_map.data or {}).items():
                    (directory / key).write_text(value)
            for source in volume.get("projected", {}).get("sources", []):
                token = source.get("serviceAccountToken")
                if token is None:
                    continue
                request = {
                    "spec": {
                        "audiences": [token["audience"]] if token.get("audience") else [],
                        "expirationSeconds": token.get("expirationSeconds", 3600),
                        # Bound to the Pod, as a real kubelet does: TokenReview then
                        # names the pod, and the token dies with it.
                        "boundObjectRef": {
                            "kind": "Pod",
                            "apiVersion": "v1",
                            "name": metadata["name"],
                            "uid": metadata["uid"],
                        },
                    }
                }
                issued = self._core.create_namespaced_service_account_token(
                    spec.get("serviceAccountName", "default"),
                    self.namespace,
                    request,  # type: ignore[arg-type]  # the client takes a plain dict too
                )
                assert issued.status is not None
                (directory / token["path"]).write_text(issued.status.token)
            for mount in spec["containers"][0].get("volumeMounts", []):
                if mount["name"] == volume["name"]:
                    local[mount["mountPath"]] = str(directory)
        return local

    @staticmethod
    def _value(var: dict[str, Any], pod: Pod, env: dict[str, str], mounts: dict[str, str]) -> str:
        if "valueFrom" in var:
            field = var["valueFrom"].get("fieldRef", {}).get("fieldPath", "")
            values = {
                "metadata.name": pod["metadata"]["name"],
                "metadata.namespace": pod["metadata"]["namespace"],
                "metadata.uid": pod["metadata"]["uid"],
                "spec.serviceAccountName": pod["spec"].get("serviceAccountName", "default"),
            }
            return str(values.get(field, ""))
        value = re.sub(
            r"\$\(([A-Za-z_][A-Za-z0-9_]*)\)", lambda m: env.get(m[1], m[0]), var.get("value", "")
        )
        for mount_path, directory in mounts.items():
            if value.startswith(mount_path + "/"):
                value = directory + value[len(mount_path) :]
        return value
