#!/usr/bin/env bash
# Builds actionlint from the pinned module in go.mod into the cache outside the repository,
# only when missing (like ../helm/build.sh), and installs shellcheck (Debian), which
# actionlint runs on every `run:` script when it is on PATH. Prints the path of the binary.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
version=$(awk '$1 == "github.com/rhysd/actionlint" {print $2} $1 == "require" && $2 == "github.com/rhysd/actionlint" {print $3}' "$here/go.mod")
stamp=$(cat "$here/go.mod" "$here/go.sum" | sha256sum | cut -c1-12)
cache=${STREAMCONSUMER_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/streamconsumer}
bin="$cache/actionlint/$version-$stamp/actionlint"

"$here/../apt-install.sh" actionlint shellcheck

if [[ ! -x "$bin" ]]; then
  mkdir -p "$(dirname "$bin")"
  echo "[actionlint] building actionlint $version from Go modules..." >&2
  started=$SECONDS
  (cd "$here" && GOTOOLCHAIN=local CGO_ENABLED=0 GOFLAGS=-mod=mod \
    go build -trimpath -ldflags "-s -w -X github.com/rhysd/actionlint.version=$version" \
    -o "$bin.tmp" github.com/rhysd/actionlint/cmd/actionlint)
  mv "$bin.tmp" "$bin"
  echo "[actionlint] built in $((SECONDS - started))s" >&2
fi
echo "$bin"
