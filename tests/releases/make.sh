#!/usr/bin/env bash
# The previous release, as the upgrade tests run it (tests/releases/README.md):
#   streamconsumer-<version>-py3-none-any.whl  the package as of COMMIT (pure Python, no deps)
#   crd.yaml                                    crds/streamconsumer.yaml as of COMMIT
#   chart.tgz                                   charts/streamconsumer as of COMMIT (helm package)
#   dev.lock                                    requirements/dev.lock as of COMMIT (its images' pins)
#   SHA256SUMS                                  their checksums
# Usage: tests/releases/make.sh COMMIT   (run it again at each release, with the release's commit)
# Needs git, the repository's virtualenv (make venv) and helm (make helm).
set -euo pipefail
COMMIT=${1:?usage: tests/releases/make.sh COMMIT}
HERE=$(cd "$(dirname "$0")" && pwd)
REPO=$(git -C "$HERE" rev-parse --show-toplevel)
PIP=${PIP:-$REPO/.venv/bin/pip}
HELM=${HELM:-$("$REPO/tests/helm/build.sh")}
full=$(git -C "$REPO" rev-parse --verify "$COMMIT^{commit}")
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
mkdir "$work/src" "$work/out"
git -C "$REPO" archive "$full" | tar -x -C "$work/src"
# The commit's time for every timestamp in the wheel and the chart: the same commit makes
# the same bytes with the same setuptools.
export SOURCE_DATE_EPOCH
SOURCE_DATE_EPOCH=$(git -C "$REPO" log -1 --format=%ct "$full")
"$PIP" wheel --quiet --no-deps --wheel-dir "$work/out" "$work/src"
cp "$work/src/crds/streamconsumer.yaml" "$work/out/crd.yaml"
cp "$work/src/requirements/dev.lock" "$work/out/dev.lock"
"$HELM" package "$work/src/charts/streamconsumer" --destination "$work/out" >/dev/null
mv "$work/out"/streamconsumer-*.tgz "$work/out/chart.tgz"
# Out with the release before, in with this one.
rm -f "$HERE"/streamconsumer-*.whl "$HERE"/crd.yaml "$HERE"/chart.tgz "$HERE"/dev.lock
cp "$work/out"/* "$HERE"/
echo "$full" > "$HERE/COMMIT"
(cd "$HERE" && sha256sum streamconsumer-*.whl crd.yaml chart.tgz dev.lock COMMIT > SHA256SUMS)
cat "$HERE/SHA256SUMS"
