#!/usr/bin/env bash
# Builds prometheus from the pinned module in go.mod into the cache outside the repository,
# only when missing (../go-tool.sh). Prints the path of the binary. (Prometheus itself
# refuses a bad config or rule file at start: no promtool needed.)
# The tests scrape static targets, so the optional service discoveries (AWS, Azure, GCE,
# Kubernetes, ...: most of its dependencies) are left out: remove_all_sd, Prometheus' own
# build tag. That makes a cold build about 3 minutes on 2 cores instead of 8 (5.7 CPU-minutes
# instead of 15.4, measured).
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
source "$here/../go-tool.sh"
version=$(go_tool_version github.com/prometheus/prometheus)
tags=remove_all_sd
bin=$(go_tool_bin prometheus "$version" "$tags")

go_tool_build "$bin" "$version" github.com/prometheus/prometheus/cmd/prometheus "-s -w" \
  "cold: about 3 minutes on 2 cores" "$tags"
echo "$bin"
