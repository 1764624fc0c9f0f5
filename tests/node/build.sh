#!/usr/bin/env bash
# Builds the test node's binaries (kubelet, kube-scheduler, kube-proxy, and the pause
# program of the sandbox image) from the pinned modules in go.mod into a cache directory
# outside the repository, like ../controlplane/build.sh. Idempotent: a binary already
# built for this go.mod, go.sum and source is kept. Progress on stderr; prints the bin dir.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
k8s_version=$(awk '$1 == "require" && $2 == "k8s.io/kubernetes" {print $3} $1 == "k8s.io/kubernetes" {print $2}' "$here/go.mod" | head -1)
# Bump layout when the build flags below change, so cached binaries are rebuilt.
layout=1
stamp=$( (echo "$layout"; cat "$here/go.mod" "$here/go.sum" "$here/cmd/pause/main.go") | sha256sum | cut -c1-12)
cache=${STREAMCONSUMER_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/streamconsumer}
bin="$cache/node/$k8s_version-$stamp/bin"
mkdir -p "$bin"

declare -A package=(
  [pause]=streamconsumer.io/node/cmd/pause
  [kube-scheduler]=k8s.io/kubernetes/cmd/kube-scheduler
  [kube-proxy]=k8s.io/kubernetes/cmd/kube-proxy
  [kubelet]=k8s.io/kubernetes/cmd/kubelet
)
order=(pause kube-scheduler kube-proxy kubelet)

version_flags() {
  local v=${k8s_version#v} pkg=k8s.io/component-base/version
  local major=${v%%.*} rest=${v#*.}
  printf -- '-s -w -X %s.gitVersion=%s -X %s.gitMajor=%s -X %s.gitMinor=%s -X %s.gitTreeState=clean -X %s.buildDate=1970-01-01T00:00:00Z' \
    "$pkg" "$k8s_version" "$pkg" "$major" "$pkg" "${rest%%.*}" "$pkg" "$pkg"
}

missing=()
for name in "${order[@]}"; do
  [[ -x "$bin/$name" ]] || missing+=("$name")
done

total=${#missing[@]}
step=0
for name in "${missing[@]}"; do
  step=$((step + 1))
  echo "[node $step/$total] building $name $k8s_version from Go modules (cold: seconds after the control plane build, minutes alone)..." >&2
  started=$SECONDS
  (cd "$here" && GOTOOLCHAIN=local CGO_ENABLED=0 GOFLAGS=-mod=mod \
    go build -trimpath -ldflags "$(version_flags)" -o "$bin/$name.tmp" "${package[$name]}")
  mv "$bin/$name.tmp" "$bin/$name"
  echo "[node $step/$total] $name built in $((SECONDS - started))s" >&2
done

echo "$bin"
