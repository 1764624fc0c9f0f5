"""Generates the chart's ValidatingAdmissionPolicy against the confused deputy
(docs/security.md#no-confused-deputy).

The operator creates the workers' pods with its own rights. Whoever may create a
StreamConsumer must therefore get no more through it than they could do themselves: a
Secret or ConfigMap it mounts or reads into env, a PersistentVolumeClaim, pull secrets,
an IRSA role on the workers' ServiceAccount, a pod-level securityContext. The policy asks
the apiserver's authorizer (CEL `authorizer`) whether the requester may do each, for the
references a request adds or changes; an update that leaves them as they were (kopf's
own bookkeeping, a tenant scaling an admin's consumer) is not asked about.

`python -m streamconsumer.admission` prints the chart template; `make crds` writes it,
and a test fails when the file and this module drift apart."""

from __future__ import annotations

import sys
from dataclasses import dataclass
from typing import Any

import yaml

from streamconsumer.models import GROUP, PLURAL

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


def _unchanged(field: str) -> str:
    return f"variables.{field} == variables.old_{field}"


def policy() -> dict[str, Any]:
    variables: list[dict[str, str]] = []
    validations: list[dict[str, str]] = []
    for field in FIELDS:
        variables.append({"name": field.variable, "expression": _at(field.path)})
        variables.append(
            {"name": f"old_{field.variable}", "expression": _at(field.path, "oldObject")}
        )
        validations.append(
            {
                "expression": f"{_unchanged(field.variable)}"
                f" || variables.{field.variable}.all(item, {field.allowed})",
                "message": f"{field.message}: a StreamConsumer cannot do for you what you may not",
                "reason": "Forbidden",
            }
        )
    # Pod-level privileges and the workers' cloud identity: set, and not as before.
    for path, allowed, message in (
        (
            "pod.securityContext",
            _may("create", "pods"),
            "spec.pod.securityContext needs the right to create pods in this namespace",
        ),
        (
            "processor.serviceAccountAnnotations",
            _may("update", "serviceaccounts"),
            "spec.processor.serviceAccountAnnotations (an IRSA role, say) needs the right to "
            "update ServiceAccounts in this namespace",
        ),
    ):
        unchanged = (
            f"({_present(path, 'oldObject')} && object.spec.{path} == oldObject.spec.{path})"
        )
        validations.append(
            {
                "expression": f"!({_present(path)}) || {unchanged} || {allowed}",
                "message": f"{message}: a StreamConsumer cannot do for you what you may not",
                "reason": "Forbidden",
            }
        )
    return {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingAdmissionPolicy",
        "metadata": {"name": f"{_NAME}-no-confused-deputy"},
        "spec": {
            "failurePolicy": "Fail",
            "matchConstraints": {
                "resourceRules": [
                    {
                        "apiGroups": [GROUP],
                        "apiVersions": ["*"],
                        "operations": ["CREATE", "UPDATE"],
                        "resources": [PLURAL],
                    }
                ]
            },
            "variables": variables,
            "validations": validations,
        },
    }


def binding() -> dict[str, Any]:
    return {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingAdmissionPolicyBinding",
        "metadata": {"name": f"{_NAME}-no-confused-deputy"},
        "spec": {
            "policyName": f"{_NAME}-no-confused-deputy",
            "validationActions": ["Deny"],
        },
    }


def render() -> str:
    documents = yaml.safe_dump_all([policy(), binding()], sort_keys=False, width=1000)
    body = documents.replace(_NAME, '{{ include "streamconsumer.name" . }}')
    return (
        "# Generated by `python -m streamconsumer.admission` (make crds): do not edit.\n"
        "{{- if .Values.admissionPolicy.enabled }}\n"
        f"{body}"
        "{{- end }}\n"
    )


if __name__ == "__main__":
    sys.stdout.write(render())
