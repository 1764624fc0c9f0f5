#!/usr/bin/env bash
# Builds kubevalidate once per Kubernetes minor it checks against (1.30 to 1.34), each
# from its own module set (k8s-1.NN.mod and .sum: k8s.io/api, apimachinery, client-go and
# apiextensions-apiserver of that release), into the cache outside the repository, only
# when missing (like ../helm/build.sh). Prints "MINOR PATH" per line.
# Cold (empty Go build cache): about 4 minutes of CPU for all five, 7.7 minutes of wall
# time measured on 2 busy cores; 20 MB each. Cached afterwards: instant.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
source "$here/../go-tool.sh"  # go_build: one build at a time, under BIN.lock
cache=${STREAMCONSUMER_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/streamconsumer}
minors=(1.30 1.31 1.32 1.33 1.34)

step=0
for minor in "${minors[@]}"; do
  step=$((step + 1))
  mod="$here/k8s-$minor.mod"
  release=$(awk '$1 == "k8s.io/api" {print $2}' "$mod")
  stamp=$(cat "$here/main.go" "$mod" "$here/k8s-$minor.sum" | sha256sum | cut -c1-12)
  bin="$cache/kubevalidate/$minor-$stamp/kubevalidate"
  if [[ ! -x "$bin" ]]; then
    echo "[kubevalidate $step/${#minors[@]}] building for Kubernetes $minor ($release) from Go modules (1-2 minutes cold)..." >&2
    started=$SECONDS
    go_build "$bin" . "-s -w -X main.release=${release/v0/1}" "" "$mod"
    echo "[kubevalidate $step/${#minors[@]}] built in $((SECONDS - started))s" >&2
  fi
  echo "$minor $bin"
done
