#!/usr/bin/env bash
# Builds the test control plane (etcd, kube-apiserver, kube-controller-manager, kubectl)
# from the pinned modules in go.mod into a cache directory outside the repository.
# Idempotent: a binary already built for this go.sum is kept. Prints the cache's bin dir.
#
# If KUBEBUILDER_ASSETS points at envtest's official binaries (etcd, kube-apiserver,
# kubectl), those are used and only the missing kube-controller-manager is built.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
k8s_version=$(awk '$1 == "k8s.io/kubernetes" {print $2}' "$here/go.mod")
# Bump layout when the build flags below change, so cached binaries are rebuilt.
layout=1
stamp=$( (echo "$layout"; cat "$here/go.mod" "$here/go.sum") | sha256sum | cut -c1-12)
cache=${STREAMCONSUMER_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/streamconsumer}
bin="$cache/controlplane/$k8s_version-$stamp/bin"
mkdir -p "$bin"

declare -A package=(
  [etcd]=streamconsumer.io/controlplane/cmd/etcd
  [kube-apiserver]=k8s.io/kubernetes/cmd/kube-apiserver
  [kube-controller-manager]=k8s.io/kubernetes/cmd/kube-controller-manager
  [kubectl]=k8s.io/kubernetes/cmd/kubectl
)

if [[ -n "${KUBEBUILDER_ASSETS:-}" ]]; then
  for name in etcd kube-apiserver kubectl; do
    [[ -x "$KUBEBUILDER_ASSETS/$name" ]] && ln -sf "$KUBEBUILDER_ASSETS/$name" "$bin/$name"
  done
fi

version_flags() {
  local v=${k8s_version#v} pkg=k8s.io/component-base/version
  local major=${v%%.*} rest=${v#*.}
  printf -- '-s -w -X %s.gitVersion=%s -X %s.gitMajor=%s -X %s.gitMinor=%s -X %s.gitTreeState=clean -X %s.buildDate=1970-01-01T00:00:00Z' \
    "$pkg" "$k8s_version" "$pkg" "$major" "$pkg" "${rest%%.*}" "$pkg" "$pkg"
}

missing=()
for name in etcd kube-apiserver kube-controller-manager kubectl; do
  [[ -x "$bin/$name" ]] || missing+=("$name")
done

total=${#missing[@]}
step=0
for name in "${missing[@]}"; do
  step=$((step + 1))
  echo "[control plane $step/$total] building $name $k8s_version from Go modules (cold builds take several minutes on 2 cores)..." >&2
  started=$SECONDS
  (cd "$here" && GOTOOLCHAIN=local CGO_ENABLED=0 GOFLAGS=-mod=mod \
    go build -trimpath -ldflags "$(version_flags)" -o "$bin/$name.tmp" "${package[$name]}")
  mv "$bin/$name.tmp" "$bin/$name"
  echo "[control plane $step/$total] $name built in $((SECONDS - started))s" >&2
done

echo "$bin"
