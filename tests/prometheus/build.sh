#!/usr/bin/env bash
# Builds prometheus and promtool from the pinned module in go.mod into the cache outside
# the repository, only when missing (like ../helm/build.sh). Prints the bin directory.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
version=$(awk '$1 == "github.com/prometheus/prometheus" {print $2}' "$here/go.mod")
stamp=$(cat "$here/go.mod" "$here/go.sum" | sha256sum | cut -c1-12)
cache=${STREAMCONSUMER_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/streamconsumer}
bin="$cache/prometheus/$version-$stamp"
mkdir -p "$bin"

step=0
for name in prometheus promtool; do
  step=$((step + 1))
  [[ -x "$bin/$name" ]] && continue
  echo "[prometheus $step/2] building $name $version from Go modules (cold: several minutes on 2 cores)..." >&2
  started=$SECONDS
  (cd "$here" && GOTOOLCHAIN=local CGO_ENABLED=0 GOFLAGS=-mod=mod \
    go build -trimpath -ldflags "-s -w" -o "$bin/$name.tmp" "github.com/prometheus/prometheus/cmd/$name")
  mv "$bin/$name.tmp" "$bin/$name"
  echo "[prometheus $step/2] $name built in $((SECONDS - started))s" >&2
done
echo "$bin"
