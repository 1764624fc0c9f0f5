#!/usr/bin/env bash
# Builds helm from the pinned module in go.mod into the cache outside the repository,
# only when missing (../go-tool.sh), unless a helm is on PATH and STREAMCONSUMER_BUILD_HELM
# is unset. Prints the path of the binary.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
source "$here/../go-tool.sh"
version=$(go_tool_version helm.sh/helm/v3)
bin=$(go_tool_bin helm "$version")

if [[ ! -x "$bin" ]] && command -v helm >/dev/null 2>&1 && [[ -z "${STREAMCONSUMER_BUILD_HELM:-}" ]]; then
  command -v helm
  exit 0
fi
go_tool_build "$bin" "$version" helm.sh/helm/v3/cmd/helm \
  "-s -w -X helm.sh/helm/v3/internal/version.version=$version" "a few minutes the first time"
echo "$bin"
