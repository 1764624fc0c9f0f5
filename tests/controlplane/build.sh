#!/usr/bin/env bash
# Builds the test control plane (etcd, kube-apiserver, kube-controller-manager, kubectl)
# from the pinned modules in go.mod into a cache directory outside the repository.
# Idempotent: a binary already built for this go.sum is kept. Prints the cache's bin dir.
#
# If KUBEBUILDER_ASSETS points at envtest's official binaries (etcd, kube-apiserver,
# kubectl), those are used and only the missing kube-controller-manager is built.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
source "$here/../k8s-binaries.sh"
k8s_version=$(awk '$1 == "k8s.io/kubernetes" {print $2}' "$here/go.mod")
# Bump layout when the build flags change, so cached binaries are rebuilt.
layout=1
bin=$(cache_bin controlplane "$here/go.mod" "$here/go.sum")

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

build_missing "$bin" "control plane" "cold builds take several minutes on 2 cores" \
  etcd kube-apiserver kube-controller-manager kubectl

echo "$bin"
