#!/usr/bin/env bash
# Builds actionlint from the pinned module in go.mod into the cache outside the repository,
# only when missing (../go-tool.sh), and installs shellcheck (Debian), which actionlint
# runs on every `run:` script when it is on PATH. Prints the path of the binary.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=tests/go-tool.sh
source "$here/../go-tool.sh"
version=$(go_tool_version github.com/rhysd/actionlint)
bin=$(go_tool_bin actionlint "$version")

"$here/../apt-install.sh" actionlint shellcheck

go_tool_build "$bin" "$version" github.com/rhysd/actionlint/cmd/actionlint \
  "-s -w -X github.com/rhysd/actionlint.version=$version" ""
echo "$bin"
