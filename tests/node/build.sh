#!/usr/bin/env bash
# Builds the test node's binaries (kubelet, kube-scheduler, kube-proxy, and the pause
# program of the sandbox image) from the pinned modules in go.mod into a cache directory
# outside the repository, like ../controlplane/build.sh. Idempotent: a binary already
# built for this go.mod, go.sum and source is kept. Progress on stderr; prints the bin dir.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
source "$here/../k8s-binaries.sh"
k8s_version=$(awk '$1 == "require" && $2 == "k8s.io/kubernetes" {print $3} $1 == "k8s.io/kubernetes" {print $2}' "$here/go.mod" | head -1)
# Bump layout when the build flags change, so cached binaries are rebuilt.
layout=1
bin=$(cache_bin node "$here/go.mod" "$here/go.sum" "$here/cmd/pause/main.go")

declare -A package=(
  [pause]=streamconsumer.io/node/cmd/pause
  [kube-scheduler]=k8s.io/kubernetes/cmd/kube-scheduler
  [kube-proxy]=k8s.io/kubernetes/cmd/kube-proxy
  [kubelet]=k8s.io/kubernetes/cmd/kubelet
)

build_missing "$bin" node "cold: seconds after the control plane build, minutes alone" \
  pause kube-scheduler kube-proxy kubelet

echo "$bin"
