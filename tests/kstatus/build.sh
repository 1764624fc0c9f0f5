#!/usr/bin/env bash
# Builds kstatus (main.go: sigs.k8s.io/cli-utils' kstatus on objects read from stdin) from
# the modules in go.mod into the cache outside the repository, only when missing
# (../go-tool.sh). Prints the path of the binary. Its Kubernetes packages are the control
# plane's (same versions): built after it, a few seconds.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
source "$here/../go-tool.sh"
version=$(go_tool_version sigs.k8s.io/cli-utils)
bin=$(go_tool_bin kstatus "$version-$(sha256sum <"$here/main.go" | cut -c1-8)")

go_tool_build "$bin" "$version" . "-s -w" "seconds after the control plane"
echo "$bin"
