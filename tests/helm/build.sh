#!/usr/bin/env bash
# Builds helm from the pinned module in go.mod into the cache outside the repository,
# only when missing (../go-tool.sh), unless a helm is on PATH and STREAMCONSUMER_BUILD_HELM
# is unset. Prints the path of the binary.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
source "$here/../go-tool.sh"
version=$(go_tool_version helm.sh/helm/v3)

# The linker flags of helm's own Makefile: its version, and the Kubernetes version it
# assumes offline (`helm template` and `helm lint` without --kube-version), from the
# client-go it is built with (v0.34.x is Kubernetes 1.34). Without them helm assumes
# v1.20, which the chart's kubeVersion refuses.
client_go=$(go_tool_version k8s.io/client-go)
IFS=. read -r k8s_major k8s_minor _ <<<"${client_go#v}"
k8s_major=$((k8s_major + 1))
ldflags="-s -w -X helm.sh/helm/v3/internal/version.version=$version"
for pkg in helm.sh/helm/v3/pkg/lint/rules helm.sh/helm/v3/pkg/chartutil; do
  ldflags+=" -X $pkg.k8sVersionMajor=$k8s_major -X $pkg.k8sVersionMinor=$k8s_minor"
done
bin=$(go_tool_bin helm "$version" "" "$ldflags")

if [[ ! -x "$bin" ]] && command -v helm >/dev/null 2>&1 && [[ -z "${STREAMCONSUMER_BUILD_HELM:-}" ]]; then
  command -v helm
  exit 0
fi
go_tool_build "$bin" "$version" helm.sh/helm/v3/cmd/helm "$ldflags" "a few minutes the first time"
echo "$bin"
