#!/usr/bin/env bash
# Installs the Debian packages the real node and the image builds need, when missing.
# Needs root (apt-get, namespaces, cgroups); a machine without them fails here, loudly, not later.
set -euo pipefail

exec "$(dirname "$0")/../apt-install.sh" node podman buildah containerd runc \
  containernetworking-plugins conmon uidmap slirp4netns fuse-overlayfs iptables debootstrap
