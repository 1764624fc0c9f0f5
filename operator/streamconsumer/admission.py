"""Generates the chart's ValidatingAdmissionPolicy against the confused deputy
(docs/security.md#no-confused-deputy).

The operator creates the workers' pods with its own rights. Whoever may create a
StreamConsumer must therefore get no more through it than they could do themselves: a
Secret or ConfigMap it mounts or reads into env, a PersistentVolumeClaim, pull secrets,
an IRSA role on the workers' ServiceAccount, a pod-level securityContext, labels that a
Service selects. The policy asks the apiserver's authorizer (CEL `authorizer`) whether
the requester may do each, for the references a request adds or changes; an update that
leaves them as they were (kopf's own bookkeeping, a tenant scaling an admin's consumer)
is not asked about, unless what runs changes (any processor or pod setting): new code
would inherit every reference.

`python -m streamconsumer.admission` prints the chart template; `make crds` writes it,
and a test fails when the file and this module drift apart."""

from __future__ import annotations

import sys
from dataclasses import dataclass
from typing import Any

import yaml

from streamconsumer.models import GROUP, PLURAL
from streamconsumer.models.resource import DELETION_PROTECTION, REQUESTED_BY, RESET_ANNOTATION

TEMPLATE = "charts/streamconsumer/templates/admission-policy.yaml"
_NAME = "__RELEASE_NAME__"  # replaced by the chart's name helper in the template


def _may(verb: str, resource: str, name: str | None = None) -> str:
    """CEL: may the requester `verb` the (core) `resource`, named `name` if given, in the
    object's namespace?"""
    check = f"authorizer.group('').resource('{resource}')"
    check += ".namespace(object.metadata.namespace)"
    if name is not None:
        check += f".name({name})"
    return f"{check}.check('{verb}').allowed()"


def _present(path: str, root: str = "object") -> str:
    """CEL: is `spec.<path>` set on `root` (object, or oldObject: null on create)?"""
    steps = path.split(".")
    return " && ".join(
        [f"{root} != null"]
        + [f"has({root}.spec.{'.'.join(steps[: i + 1])})" for i in range(len(steps))]
    )


def _at(path: str, root: str = "object") -> str:
    """CEL: the list at `spec.<path>` of `root`, [] where it is not set."""
    return f"{_present(path, root)} ? {root}.spec.{path} : []"


def _gettable(resource: str, name: str) -> str:
    """CEL: true if the reference at `name` (item.secretRef.name, say) is absent, or the
    requester may get the object it names."""
    steps = name.split(".")
    absent = [f"!has({'.'.join(steps[:i])})" for i in range(2, len(steps) + 1)]
    return "(" + " || ".join([*absent, _may("get", resource, name)]) + ")"


def _all(*checks: str) -> str:
    return " && ".join(checks)


_SECRET, _CONFIG_MAP = "secrets", "configmaps"


@dataclass(frozen=True)
class Field:
    """A list in the spec whose items may reference what their requester must be allowed."""

    variable: str
    path: str
    allowed: str  # CEL over `item`, one element of the list
    message: str


FIELDS = (
    Field(
        "envFrom",
        "processor.envFrom",
        _all(
            _gettable(_SECRET, "item.secretRef.name"),
            _gettable(_CONFIG_MAP, "item.configMapRef.name"),
        ),
        "spec.processor.envFrom names a Secret or ConfigMap you may not get yourself",
    ),
    Field(
        "env",
        "processor.env",
        _all(
            _gettable(_SECRET, "item.valueFrom.secretKeyRef.name"),
            _gettable(_CONFIG_MAP, "item.valueFrom.configMapKeyRef.name"),
        ),
        "spec.processor.env reads a Secret or ConfigMap you may not get yourself",
    ),
    Field(
        "volumes",
        "pod.volumes",
        _all(
            _gettable(_SECRET, "item.secret.secretName"),
            _gettable(_CONFIG_MAP, "item.configMap.name"),
            _gettable("persistentvolumeclaims", "item.persistentVolumeClaim.claimName"),
            _gettable(_SECRET, "item.csi.nodePublishSecretRef.name"),
            # A claim made for the pod: as if the tenant created it (clones, bound PVs).
            f"(!has(item.ephemeral) || {_may('create', 'persistentvolumeclaims')})",
            "(!has(item.projected) || !has(item.projected.sources)"
            " || item.projected.sources.all(source, "
            + _all(
                _gettable(_SECRET, "source.secret.name"),
                _gettable(_CONFIG_MAP, "source.configMap.name"),
            )
            + "))",
        ),
        "spec.pod.volumes mounts a Secret, ConfigMap or PersistentVolumeClaim you may not "
        "get yourself",
    ),
    Field(
        "imagePullSecrets",
        "pod.imagePullSecrets",
        _gettable(_SECRET, "item.name"),
        "spec.pod.imagePullSecrets names a Secret you may not get yourself",
    ),
)


# An update that leaves what runs exactly as it was (processor and pod settings) is not
# asked about: a tenant may scale or pause an admin's consumer. Any change to them (a new
# image, a new env value) re-checks every reference: new code would inherit them.
SAME_WORKLOAD = (
    "oldObject != null && object.spec.processor == oldObject.spec.processor"
    " && has(object.spec.pod) == has(oldObject.spec.pod)"
    " && (!has(object.spec.pod) || object.spec.pod == oldObject.spec.pod)"
)
_FORBIDDEN = ": a StreamConsumer cannot do for you what you may not"

# Pod-level settings a pod of one's own would need the right to create pods for, and the
# workers' cloud identity: (path, CEL, the right in words).
_CREATE_PODS = (_may("create", "pods"), "create pods")
PRIVILEGES = (
    *(
        (f"pod.{name}", *_CREATE_PODS)
        for name in (
            "securityContext",
            "labels",  # what a Service or a NetworkPolicy selects: any key may be
            "annotations",  # AppArmor's annotation, kube2iam's role
            "nodeSelector",
            "tolerations",
            "affinity",
            "priorityClassName",
        )
    ),
    (
        "processor.serviceAccountAnnotations",
        _may("update", "serviceaccounts"),
        "update ServiceAccounts",
    ),
    # A ServiceAccount name an IAM trust policy (IRSA, EKS Pod Identity) may name: only
    # for someone who could make that ServiceAccount and run pods as it themselves.
    # (RBAC cannot limit `create` by name, so none is asked about.)
    (
        "processor.serviceAccountName",
        _all(_may("create", "serviceaccounts"), _may("create", "pods")),
        "create ServiceAccounts and pods",
    ),
)


# `spec.pod.unrestricted` (models/pod_policy.py): only where the admins allow it (the
# chart's list, rendered in; the operator checks the same list), and only for someone
# who could run such a pod themselves.
_UNRESTRICTED_NAMESPACES = "__UNRESTRICTED_NAMESPACES__"
_UNRESTRICTED = f"({_present('pod.unrestricted')} && object.spec.pod.unrestricted)"
UNRESTRICTED_VALIDATIONS = (
    (
        f"object.metadata.namespace in {_UNRESTRICTED_NAMESPACES}",
        "spec.pod.unrestricted is not allowed in this namespace: platform admins list "
        "the namespaces that may run unrestricted workers (podPolicy.unrestrictedNamespaces)",
    ),
    (
        _may("create", "pods"),
        "spec.pod.unrestricted needs the right to create pods in this namespace" + _FORBIDDEN,
    ),
)


def _annotation(key: str, root: str) -> str:
    """CEL: the annotation `key` on `root` (object or oldObject), '' where absent."""
    return (
        f"{root} != null && has({root}.metadata.annotations) && "
        f"'{key}' in {root}.metadata.annotations ? {root}.metadata.annotations['{key}'] : ''"
    )


def _paused(root: str) -> str:
    return f"{root} != null && has({root}.spec.paused) && {root}.spec.paused"


# Audit (streamconsumer/audit.py): the requester annotation names whoever writes it, and
# a change of what is audited (a pause, a resume, a reset) leaves no one else's name.
_AUDIT_VARIABLES = (
    ("requested_by", _annotation(REQUESTED_BY, "object")),
    ("old_requested_by", _annotation(REQUESTED_BY, "oldObject")),
    (
        "audited_change",
        f"({_paused('object')}) != ({_paused('oldObject')}) || "
        f"({_annotation(RESET_ANNOTATION, 'object')}) != "
        f"({_annotation(RESET_ANNOTATION, 'oldObject')})",
    ),
)
AUDIT_VALIDATION = {
    "expression": "variables.requested_by == '' || "
    "variables.requested_by == request.userInfo.username || "
    "(!variables.audited_change && variables.requested_by == variables.old_requested_by)",
    "messageExpression": f"'{REQUESTED_BY} must name you (' + request.userInfo.username + ') "
    "when you set it, pause, resume or reset: set it to your name or remove it'",
    "reason": "Forbidden",
}


def policy() -> dict[str, Any]:
    variables = [{"name": "same_workload", "expression": SAME_WORKLOAD}]
    variables += [{"name": name, "expression": expression} for name, expression in _AUDIT_VARIABLES]
    validations: list[dict[str, str]] = []
    for field in FIELDS:
        variables.append({"name": field.variable, "expression": _at(field.path)})
        validations.append(
            {
                "expression": "variables.same_workload"
                f" || variables.{field.variable}.all(item, {field.allowed})",
                "message": field.message + _FORBIDDEN,
                "reason": "Forbidden",
            }
        )
    for path, allowed, right in PRIVILEGES:
        validations.append(
            {
                "expression": f"variables.same_workload || !({_present(path)}) || {allowed}",
                "message": f"spec.{path} needs the right to {right} in this namespace" + _FORBIDDEN,
                "reason": "Forbidden",
            }
        )
    validations.append(AUDIT_VALIDATION)
    for allowed, message in UNRESTRICTED_VALIDATIONS:
        validations.append(
            {
                "expression": f"variables.same_workload || !{_UNRESTRICTED} || {allowed}",
                "message": message,
                "reason": "Forbidden",
            }
        )
    return _on_stream_consumers(
        "no-confused-deputy", ["CREATE", "UPDATE"], variables=variables, validations=validations
    )


def deletion_guard() -> dict[str, Any]:
    """A StreamConsumer marked `DELETION_PROTECTION: "true"` cannot be deleted (a GitOps
    prune of one meant to stay): its checkpoints stay where they are."""
    marked = (
        f"has(oldObject.metadata.annotations) && '{DELETION_PROTECTION}' in "
        f"oldObject.metadata.annotations && "
        f"oldObject.metadata.annotations['{DELETION_PROTECTION}'] == 'true'"
    )
    return _on_stream_consumers(
        "deletion-guard",
        ["DELETE"],
        validations=[
            {
                "expression": f"!({marked})",
                "message": f"this StreamConsumer is protected from deletion "
                f'({DELETION_PROTECTION}: "true"): remove the annotation first',
                "reason": "Forbidden",
            }
        ],
    )


def _on_stream_consumers(suffix: str, operations: list[str], **checks: Any) -> dict[str, Any]:
    """A policy that fails closed on `operations` of StreamConsumers, with its `checks`
    (variables, validations) as the spec's own fields."""
    rule = {"apiGroups": [GROUP], "apiVersions": ["*"], "operations": operations}
    return {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingAdmissionPolicy",
        "metadata": {"name": f"{_NAME}-{suffix}"},
        "spec": {
            "failurePolicy": "Fail",
            "matchConstraints": {"resourceRules": [{**rule, "resources": [PLURAL]}]},
            **checks,
        },
    }


def binding(policy_name: str) -> dict[str, Any]:
    return {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingAdmissionPolicyBinding",
        "metadata": {"name": policy_name},
        "spec": {"policyName": policy_name, "validationActions": ["Deny"]},
    }


def render() -> str:
    documents = yaml.safe_dump_all(
        [
            policy(),
            binding(f"{_NAME}-no-confused-deputy"),
            deletion_guard(),
            binding(f"{_NAME}-deletion-guard"),
        ],
        sort_keys=False,
        width=1000,
    )
    body = documents.replace(_NAME, '{{ include "streamconsumer.name" . }}').replace(
        _UNRESTRICTED_NAMESPACES,
        "{{ .Values.podPolicy.unrestrictedNamespaces | default list | toJson }}",
    )
    return (
        "# Generated by `python -m streamconsumer.admission` (make crds): do not edit.\n"
        "{{- if .Values.admissionPolicy.enabled }}\n"
        f"{body}"
        "{{- end }}\n"
    )


if __name__ == "__main__":
    sys.stdout.write(render())
