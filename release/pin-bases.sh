#!/usr/bin/env bash
# The images' base (ARG PYTHON in operator/Dockerfile and worker-image/Dockerfile*) is
# pinned by the digest of its multi-architecture index. This prints that pin and the
# digest its tag names in the registry today (a new patch of the base: edit the three
# Dockerfiles); with --verify it only checks that the pinned digest resolves to an index
# with linux/amd64 and linux/arm64 images (the release workflow, before building).
# Needs Docker Hub and docker (buildx), skopeo or crane: not this repository's test
# machines, which have no route to Docker Hub.
set -euo pipefail
cd "$(dirname "$0")/.."

dockerfiles=(operator/Dockerfile worker-image/Dockerfile worker-image/Dockerfile.spark)
mapfile -t pins < <(sed -n 's/^ARG PYTHON=//p' "${dockerfiles[@]}" | sort -u)
if (( ${#pins[@]} != 1 )) || [[ ${pins[0]} != *@sha256:* ]]; then
  echo "pin-bases: the Dockerfiles must pin one base by digest, they pin: ${pins[*]}" >&2
  exit 1
fi
pinned=${pins[0]}
tag=${pinned%@*}

# The raw manifest (an index) of a reference, from whichever client is here.
raw_manifest() {
  if docker buildx version >/dev/null 2>&1; then
    docker buildx imagetools inspect --raw "docker.io/library/$1"
  elif command -v skopeo >/dev/null 2>&1; then
    skopeo inspect --raw "docker://docker.io/library/$1"
  elif command -v crane >/dev/null 2>&1; then
    crane manifest "docker.io/library/$1"
  else
    echo "pin-bases: needs docker (buildx), skopeo or crane" >&2
    return 1
  fi
}

if [[ ${1:-} == --verify ]]; then
  manifest=$(raw_manifest "$pinned")
  python3 -c '
import json, sys
index = json.load(sys.stdin)
found = {(m["platform"]["os"], m["platform"]["architecture"]) for m in index.get("manifests", [])
         if "platform" in m}
missing = {("linux", "amd64"), ("linux", "arm64")} - found
if missing:
    sys.exit(f"pin-bases: {sys.argv[1]} is no index of linux/amd64 and linux/arm64 (has {sorted(found)})")
print(f"{sys.argv[1]}: an index of {len(found)} platforms, linux/amd64 and linux/arm64 among them")
' "$pinned" <<<"$manifest"
  exit 0
fi

# The digest is of the manifest's bytes as served (piped: $(...) would drop a final newline).
today="$tag@sha256:$(raw_manifest "$tag" | sha256sum | cut -d' ' -f1)"
echo "pinned: $pinned"
echo "today:  $today"
[[ $today == "$pinned" ]] && echo "up to date" || echo "differs: put the digest of today in ${dockerfiles[*]}"
