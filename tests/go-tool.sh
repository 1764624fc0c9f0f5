# shellcheck shell=bash
# Sourced by tests/helm/build.sh, tests/actionlint/build.sh, tests/prometheus/build.sh and
# tests/kubevalidate/build.sh, each of which builds one tool from the pinned module in its
# go.mod into a cache outside the repository, only when missing, and by
# tests/k8s-binaries.sh (`go_build`). They set `here` (their directory) before calling these.
# shellcheck disable=SC2154  # `here`: set by the script that sources this one

# The tools are never debugged: no debug information compiled (the linker's -w dropped it
# anyway), about 8% less CPU for a cold build (measured on kubevalidate).
GO_NO_DWARF=-gcflags=all=-dwarf=false

# The compiler and linker collect garbage often at Go's default GOGC=100: at 400 the
# same etcd build took 24% less CPU (142 -> 108 CPU-s, the mean of two runs each), for
# about 1.3x the memory; the soft limit keeps the largest packages of Kubernetes from
# growing past it. A GOGC or GOMEMLIMIT of the caller's is kept.
GO_BUILD_GOGC=${GOGC:-400}
GO_BUILD_MEMLIMIT=${GOMEMLIMIT:-3GiB}

# go_build BIN PACKAGE LDFLAGS [TAGS] [MODFILE]: PACKAGE built from the modules of
# $here/go.mod (or of MODFILE) into BIN with the build TAGS (comma-separated), through
# BIN.tmp (a build cut short leaves no BIN behind). `make test` builds while the tests run, and a test asks for its tool
# itself: one build of BIN at a time, under BIN.lock; who waited finds BIN built.
go_build() {
  local lock
  mkdir -p "$(dirname "$1")"
  exec {lock}>"$1.lock"
  flock "$lock"
  if [[ ! -x "$1" ]]; then
    (cd "$here" && GOTOOLCHAIN=local CGO_ENABLED=0 GOFLAGS=-mod=mod \
      GOGC=$GO_BUILD_GOGC GOMEMLIMIT=$GO_BUILD_MEMLIMIT \
      go build ${5:+-modfile="$5"} -trimpath "$GO_NO_DWARF" -tags "${4:-}" -ldflags "$3" \
      -o "$1.tmp" "$2")
    mv "$1.tmp" "$1"
  fi
  exec {lock}>&-
}

# go_tool_version MODULE: the version go.mod requires MODULE at (in a require block or on
# a require line of its own).
go_tool_version() {
  awk -v module="$1" '$1 == module {print $2} $1 == "require" && $2 == module {print $3}' \
    "$here/go.mod"
}

# go_tool_bin NAME VERSION [TAGS] [LDFLAGS]: where NAME at VERSION, built from this go.mod
# and go.sum with the build TAGS and the linker flags LDFLAGS, is cached (a change to any
# gives a fresh place). Printed, not created. A tool whose LDFLAGS never change may leave
# them out (its cached binary keeps its place).
go_tool_bin() {
  local stamp cache
  stamp=$( (echo "${3:-}"; if [[ -n "${4:-}" ]]; then echo "$4"; fi
    cat "$here/go.mod" "$here/go.sum") | sha256sum | cut -c1-12)
  cache=${STREAMCONSUMER_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/streamconsumer}
  echo "$cache/$1/$2-$stamp/$1"
}

# go_tool_build BIN VERSION PACKAGE LDFLAGS NOTE [TAGS]: builds PACKAGE at VERSION into BIN
# (a file named for the tool) with the build TAGS unless it is there, with progress on
# stderr; NOTE says how long a cold build takes (or is empty).
go_tool_build() {
  local bin=$1 version=$2 package=$3 ldflags=$4 note=$5 tags=${6:-} name started
  name=$(basename "$bin")
  [[ -x "$bin" ]] && return 0
  mkdir -p "$(dirname "$bin")"
  echo "[$name] building $name $version from Go modules${note:+ ($note)}..." >&2
  started=$SECONDS
  go_build "$bin" "$package" "$ldflags" "$tags"
  echo "[$name] built in $((SECONDS - started))s" >&2
}
