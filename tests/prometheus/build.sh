#!/usr/bin/env bash
# Builds prometheus from the pinned module in go.mod into the cache outside the repository,
# only when missing (../go-tool.sh). Prints the path of the binary. (Prometheus itself
# refuses a bad config or rule file at start: no promtool needed.)
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
source "$here/../go-tool.sh"
version=$(go_tool_version github.com/prometheus/prometheus)
bin=$(go_tool_bin prometheus "$version")

go_tool_build "$bin" "$version" github.com/prometheus/prometheus/cmd/prometheus "-s -w" \
  "cold: 5-15 minutes on 2 cores"
echo "$bin"
