#!/usr/bin/env bash
# Builds helm from the pinned module in go.mod into the cache outside the repository,
# only when missing (like ../controlplane/build.sh). Prints the path of the binary.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
version=$(awk '$1 == "helm.sh/helm/v3" {print $2}' "$here/go.mod")
stamp=$(cat "$here/go.mod" "$here/go.sum" | sha256sum | cut -c1-12)
cache=${STREAMCONSUMER_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/streamconsumer}
bin="$cache/helm/$version-$stamp/helm"

if [[ ! -x "$bin" ]]; then
  if command -v helm >/dev/null 2>&1 && [[ -z "${STREAMCONSUMER_BUILD_HELM:-}" ]]; then
    command -v helm
    exit 0
  fi
  mkdir -p "$(dirname "$bin")"
  echo "[helm] building helm $version from Go modules (a few minutes the first time)..." >&2
  started=$SECONDS
  (cd "$here" && GOTOOLCHAIN=local CGO_ENABLED=0 GOFLAGS=-mod=mod \
    go build -trimpath -ldflags "-s -w -X helm.sh/helm/v3/internal/version.version=$version" \
    -o "$bin.tmp" helm.sh/helm/v3/cmd/helm)
  mv "$bin.tmp" "$bin"
  echo "[helm] built in $((SECONDS - started))s" >&2
fi
echo "$bin"
