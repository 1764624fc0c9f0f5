#!/usr/bin/env bash
# Installs the Debian packages named (after a tag for the messages) that are missing.
# `make test` builds its tools side by side, so apt runs under one lock: two apt-gets at
# once would fail on dpkg's lock instead of waiting for it. Needs root when one is missing.
set -euo pipefail

tag=$1
shift
missing=()
for package in "$@"; do
  dpkg-query -W -f='${Status}' "$package" 2>/dev/null | grep -q "ok installed" || missing+=("$package")
done
(( ${#missing[@]} == 0 )) && exit 0

echo "[$tag] installing Debian packages: ${missing[*]}" >&2
if [[ $(id -u) != 0 ]]; then
  echo "[$tag] installing them needs root (apt-get); run make as root" >&2
  exit 1
fi
started=$SECONDS
export DEBIAN_FRONTEND=noninteractive
exec 9>/var/lock/streamconsumer-apt.lock
flock 9
apt-get update -q >&2
apt-get install -y -q --no-install-recommends "${missing[@]}" >&2
echo "[$tag] packages installed in $((SECONDS - started))s" >&2
