# Sourced by tests/controlplane/build.sh and tests/node/build.sh, which build Kubernetes
# binaries from the pinned modules of their go.mod into a cache outside the repository.
# They set `here` (their directory), `k8s_version`, `layout` and the array `package`
# (binary name -> Go package) before calling these.

source "$(dirname "${BASH_SOURCE[0]}")/go-tool.sh"  # go_build

# The bin dir of the cache for KIND's binaries built from the given input files: a change
# to any of them, or to `layout`, gives a fresh one. Created; printed.
cache_bin() {
  local kind=$1 stamp dir
  shift
  stamp=$( (echo "$layout"; cat "$@") | sha256sum | cut -c1-12)
  dir="${STREAMCONSUMER_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/streamconsumer}/$kind/$k8s_version-$stamp/bin"
  mkdir -p "$dir"
  echo "$dir"
}

# The linker flags that stamp k8s_version into a binary, as Kubernetes' release builds do.
version_flags() {
  local v=${k8s_version#v} pkg=k8s.io/component-base/version
  local major=${v%%.*} rest=${v#*.}
  printf -- '-s -w -X %s.gitVersion=%s -X %s.gitMajor=%s -X %s.gitMinor=%s -X %s.gitTreeState=clean -X %s.buildDate=1970-01-01T00:00:00Z' \
    "$pkg" "$k8s_version" "$pkg" "$major" "$pkg" "${rest%%.*}" "$pkg" "$pkg"
}

# build_missing BIN LABEL COLD NAME...: builds each NAME not yet in BIN, in order, with
# progress on stderr as "[LABEL step/total]"; COLD says how long a cold build takes.
build_missing() {
  local bin=$1 label=$2 cold=$3 name started step=0
  shift 3
  local missing=()
  for name in "$@"; do
    [[ -x "$bin/$name" ]] || missing+=("$name")
  done
  for name in "${missing[@]}"; do
    step=$((step + 1))
    echo "[$label $step/${#missing[@]}] building $name $k8s_version from Go modules ($cold)..." >&2
    started=$SECONDS
    go_build "$bin/$name" "${package[$name]}" "$(version_flags)"
    echo "[$label $step/${#missing[@]}] $name built in $((SECONDS - started))s" >&2
  done
}
