#!/usr/bin/env bash
# Builds prometheus from the pinned module in go.mod into the cache outside the repository,
# only when missing (like ../helm/build.sh). Prints the path of the binary. (Prometheus
# itself refuses a bad config or rule file at start: no promtool needed.)
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
version=$(awk '$1 == "github.com/prometheus/prometheus" {print $2} $1 == "require" && $2 == "github.com/prometheus/prometheus" {print $3}' "$here/go.mod")
stamp=$(cat "$here/go.mod" "$here/go.sum" | sha256sum | cut -c1-12)
cache=${STREAMCONSUMER_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/streamconsumer}
bin="$cache/prometheus/$version-$stamp"
mkdir -p "$bin"

if [[ ! -x "$bin/prometheus" ]]; then
  echo "[prometheus] building prometheus $version from Go modules (cold: 5-15 minutes on 2 cores)..." >&2
  started=$SECONDS
  (cd "$here" && GOTOOLCHAIN=local CGO_ENABLED=0 GOFLAGS=-mod=mod \
    go build -trimpath -ldflags "-s -w" -o "$bin/prometheus.tmp" github.com/prometheus/prometheus/cmd/prometheus)
  mv "$bin/prometheus.tmp" "$bin/prometheus"
  echo "[prometheus] built in $((SECONDS - started))s" >&2
fi
echo "$bin/prometheus"
