"""What a tenant may put in the worker pods' template (docs/security.md#pod-template):
no more than a pod they could run themselves under the `restricted` Pod Security
Standard. The operator creates the pods with its own rights, so without these rules a
StreamConsumer would be a way around the namespace's policy (a hostPath of the container
runtime's socket with group 0 is root on the node).

Each rule is a CEL expression (with its message) that the CRD checks at `kubectl apply`;
`models/resource.py` attaches them. The operator checks the volume rules again before it
makes workers (`refused_volume_sources`). The lists follow the Pod Security Standards
(https://kubernetes.io/docs/concepts/security/pod-security-standards/), and go further
where the standard trusts what a pod's creator may do: inline CSI volumes and projected
ServiceAccount tokens."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

SAFE_VOLUME_SOURCES = (
    "configMap",
    "secret",
    "emptyDir",
    "persistentVolumeClaim",
    "projected",
    "downwardAPI",
    "ephemeral",
    "image",
)
"""Volume sources a tenant can use safely: what the namespace already lets them read."""

UNSAFE_VOLUME_SOURCES = (
    "awsElasticBlockStore",
    "azureDisk",
    "azureFile",
    "cephfs",
    "cinder",
    "csi",
    "fc",
    "flexVolume",
    "flocker",
    "gcePersistentDisk",
    "gitRepo",
    "glusterfs",
    "hostPath",
    "iscsi",
    "nfs",
    "photonPersistentDisk",
    "portworxVolume",
    "quobyte",
    "rbd",
    "scaleIO",
    "storageos",
    "vsphereVolume",
)
"""Every other source of core/v1 Volume (tests/unit/test_pod_policy.py checks the two lists
cover Kubernetes' schema): the node's files, or storage reached with credentials the
tenant does not hold. An inline `csi` volume is whatever its driver makes of
`volumeAttributes`, with the driver's own credentials (a secrets store's, a bucket's):
RBAC does not say which of them a tenant may use, so it is the admins' to allow."""

SAFE_PROJECTED_SOURCES = ("configMap", "secret", "downwardAPI")
"""Sources of a projected volume a tenant can use: a Secret or ConfigMap (which the
admission policy asks they may get) and the pod's own fields."""

UNSAFE_PROJECTED_SOURCES = ("clusterTrustBundle", "podCertificate", "serviceAccountToken")
"""The other sources (tests/unit/test_pod_policy.py checks they cover Kubernetes' schema):
a token or a certificate of the workers' ServiceAccount, for any audience (the
apiserver's, sts.amazonaws.com), or trust bundles read with the kubelet's rights.
Processor code has no Kubernetes identity to use (docs/security.md#pod-template)."""

SAFE_SYSCTLS = (
    "kernel.shm_rmid_forced",
    "net.ipv4.ip_local_port_range",
    "net.ipv4.ip_local_reserved_ports",
    "net.ipv4.ip_unprivileged_port_start",
    "net.ipv4.ping_group_range",
    "net.ipv4.tcp_fin_timeout",
    "net.ipv4.tcp_keepalive_intvl",
    "net.ipv4.tcp_keepalive_probes",
    "net.ipv4.tcp_keepalive_time",
    "net.ipv4.tcp_syncookies",
)
"""The sysctls namespaced to the pod (the baseline standard's list)."""

SELINUX_TYPES = ("container_t", "container_init_t", "container_kvm_t", "container_engine_t")
"""SELinux types a container may ask for; anything else (spc_t) escapes confinement."""

RESERVED_ENV_PREFIX = "STREAMCONSUMER_"
RESERVED_ENV_NAMES = ("POD_NAME",)
"""The worker's own settings: the operator's URL, CA and token paths, the shards' source.
A tenant who could set them could send the worker's token in clear or elsewhere."""
LOG_LEVEL_ENV = "STREAMCONSUMER_LOG_LEVEL"
SPARK_JARS_ENV = "STREAMCONSUMER_SPARK_JARS"  # a directory of jars in the worker image
SPARK_CONF_ENV = "STREAMCONSUMER_SPARK_CONF"  # the pipeline's Spark settings
TENANT_ENV_NAMES = (LOG_LEVEL_ENV, SPARK_JARS_ENV, SPARK_CONF_ENV)
"""Under the reserved prefix, the worker's knobs a tenant may set (the operator never
does): they point nothing at another party."""


def _quoted(names: tuple[str, ...]) -> str:
    return "[" + ", ".join(f"'{name}'" for name in names) + "]"


def _unset_or(field: str, condition: str) -> str:
    return f"(!has({field}) || {condition})"


def _listed(names: tuple[str, ...]) -> str:
    return names[0] if len(names) == 1 else ", ".join(names[:-1]) + " or " + names[-1]


SC = "self.securityContext"
VOLUME_RULE = (
    "!has(self.volumes) || self.volumes.all(v, "
    + " && ".join(f"!has(v.{source})" for source in UNSAFE_VOLUME_SOURCES)
    + ")",
    f"volumes may use only {_listed(SAFE_VOLUME_SOURCES)}: the workers must not reach "
    "the node's files or storage beyond what the namespace grants",
)
MAX_PROJECTED_SOURCES = 64
"""Sources of one projected volume at most (Kubernetes sets none): PROJECTED_RULE looks
at each source of each volume, and the apiserver refuses a CRD whose rules could cost
more than its budget on the largest object."""
PROJECTED_RULE = (
    "!has(self.volumes) || self.volumes.all(v, !has(v.projected) || "
    "!has(v.projected.sources) || v.projected.sources.all(s, "
    + " && ".join(f"!has(s.{source})" for source in UNSAFE_PROJECTED_SOURCES)
    + "))",
    f"projected volumes may use only {_listed(SAFE_PROJECTED_SOURCES)} sources: a "
    "serviceAccountToken or podCertificate would hand the processor a credential of the "
    "workers' ServiceAccount",
)
ROOT_RULE = (
    f"!has({SC}) || ("
    + " && ".join(
        (
            _unset_or(f"{SC}.runAsUser", f"{SC}.runAsUser != 0"),
            _unset_or(f"{SC}.runAsGroup", f"{SC}.runAsGroup != 0"),
            _unset_or(f"{SC}.fsGroup", f"{SC}.fsGroup != 0"),
            _unset_or(f"{SC}.supplementalGroups", f"!(0 in {SC}.supplementalGroups)"),
            _unset_or(f"{SC}.runAsNonRoot", f"{SC}.runAsNonRoot"),
        )
    )
    + ")",
    "securityContext may not run the workers as root or with group 0 (runAsUser, "
    "runAsGroup, fsGroup, supplementalGroups, runAsNonRoot)",
)
SELINUX = f"{SC}.seLinuxOptions"
SELINUX_RULE = (
    f"!has({SC}) || !has({SELINUX}) || ("
    f"!has({SELINUX}.user) && !has({SELINUX}.role) && "
    + _unset_or(f"{SELINUX}.type", f"{SELINUX}.type in {_quoted(SELINUX_TYPES)}")
    + ")",
    f"securityContext.seLinuxOptions may set only type, one of {_listed(SELINUX_TYPES)}",
)
UNCONFINED_RULE = (
    f"!has({SC}) || ("
    + _unset_or(f"{SC}.appArmorProfile", f"{SC}.appArmorProfile.type != 'Unconfined'")
    + " && "
    + _unset_or(f"{SC}.seccompProfile", f"{SC}.seccompProfile.type != 'Unconfined'")
    + " && "
    + _unset_or(
        f"{SC}.windowsOptions",
        f"!has({SC}.windowsOptions.hostProcess) || !{SC}.windowsOptions.hostProcess",
    )
    + ")",
    "securityContext may not make the workers Unconfined (appArmorProfile, seccompProfile) "
    "or Windows host processes",
)
SYSCTL_RULE = (
    f"!has({SC}) || !has({SC}.sysctls) || {SC}.sysctls.all(s, s.name in {_quoted(SAFE_SYSCTLS)})",
    f"securityContext.sysctls may set only {_listed(SAFE_SYSCTLS)}",
)
UNRESTRICTED = "unrestricted"
"""`spec.pod.unrestricted`: the pod rules above are lifted, for namespaces whose workers
need more (a hostPath, a node's group). It takes effect only in the namespaces platform
admins list in the operator's configuration (`STREAMCONSUMER_UNRESTRICTED_POD_NAMESPACES`,
the chart's `podPolicy.unrestrictedNamespaces`): elsewhere the chart's admission policy
refuses it at apply and the operator creates no pods for it. Never the env rules below:
those protect the worker's token, which no namespace needs to redirect."""


def _unless_unrestricted(rule: tuple[str, str]) -> tuple[str, str]:
    expression, message = rule
    return (
        f"(has(self.{UNRESTRICTED}) && self.{UNRESTRICTED}) || ({expression})",
        f"{message} (platform admins may allow spec.pod.{UNRESTRICTED} in a namespace)",
    )


POD_RULES = tuple(
    _unless_unrestricted(rule)
    for rule in (
        VOLUME_RULE,
        PROJECTED_RULE,
        ROOT_RULE,
        SELINUX_RULE,
        UNCONFINED_RULE,
        SYSCTL_RULE,
    )
)


def refused_volume_sources(volumes: list[dict[str, Any]]) -> list[str]:
    """The paths of the sources VOLUME_RULE and PROJECTED_RULE refuse, as the apiserver
    names fields (`volumes[1].csi`): the operator checks them again when it renders the
    pod, for an object the CRD admitted before a rule existed (CRD validation ratcheting
    lets an unchanged field stay)."""
    refused: list[str] = []
    for index, volume in enumerate(volumes):
        refused += [f"volumes[{index}].{s}" for s in UNSAFE_VOLUME_SOURCES if s in volume]
        projected: Mapping[str, Any] = volume.get("projected") or {}
        for at, source in enumerate(projected.get("sources") or []):
            refused += [
                f"volumes[{index}].projected.sources[{at}].{s}"
                for s in UNSAFE_PROJECTED_SOURCES
                if s in source
            ]
    return refused


ENV_RULE = (
    "!has(self.env) || self.env.all(e, "
    f"(!e.name.startsWith('{RESERVED_ENV_PREFIX}') || e.name in {_quoted(TENANT_ENV_NAMES)})"
    f" && !(e.name in {_quoted(RESERVED_ENV_NAMES)}))",
    f"env names {RESERVED_ENV_PREFIX}* (but {_listed(TENANT_ENV_NAMES)}) and "
    f"{', '.join(RESERVED_ENV_NAMES)} are the worker's own settings, set by the operator",
)
ENV_FROM_RULE = (
    "!has(self.envFrom) || self.envFrom.all(e, "
    f"!has(e.prefix) || !e.prefix.startsWith('{RESERVED_ENV_PREFIX}'))",
    f"an envFrom prefix may not start with {RESERVED_ENV_PREFIX}: those names are the "
    "worker's own settings",
)
"""A source's keys are data, not spec, and cannot be checked at apply; the operator's
own entries in `env` win over `envFrom` (the operator URL, token and CA paths among
them), so a key can set only what the operator leaves unset."""
PROCESSOR_RULES = (ENV_RULE, ENV_FROM_RULE)
