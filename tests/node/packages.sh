#!/usr/bin/env bash
# Installs the Debian packages the real node and the image builds need, when missing.
# Needs root (apt-get); a machine without them fails here, loudly, not later.
set -euo pipefail

packages=(podman buildah containerd runc containernetworking-plugins conmon uidmap
  slirp4netns fuse-overlayfs iptables debootstrap)
missing=()
for package in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$package" 2>/dev/null | grep -q "ok installed" || missing+=("$package")
done
(( ${#missing[@]} == 0 )) && exit 0

echo "[node] installing Debian packages: ${missing[*]}" >&2
if [[ $(id -u) != 0 ]]; then
  echo "[node] the real node needs root (apt-get, namespaces, cgroups); run make test as root" >&2
  exit 1
fi
started=$SECONDS
export DEBIAN_FRONTEND=noninteractive
apt-get update -q >&2
apt-get install -y -q --no-install-recommends "${missing[@]}" >&2
echo "[node] packages installed in $((SECONDS - started))s" >&2
