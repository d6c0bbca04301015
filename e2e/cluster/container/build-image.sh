#!/bin/bash
# `make image`: fitgate's container image, built offline (see the Dockerfile's header).
#
#   e2e/cluster/container/build-image.sh <python> [repository]
#
# 1. A container engine (engine.sh: the user's Docker, or a private dockerd).
# 2. The base: Debian bookworm minbase + Python 3.11 from mmdebstrap (base.sh), tagged with
#    a hash of base.sh.
# 3. Wheels for fitgate (with its compiled core) and every dependency, built on the host
#    with `pip wheel` into build/wheelhouse; the image build installs only those
#    (`pip install --no-index`), so it needs no network and no compiler.
# 4. `docker build` (legacy builder, no BuildKit frontend to pull), tagged
#    <repository>:src-<hash of every input> and <repository>:latest. When that tag exists the
#    build is skipped (the warm path), so `make test` rebuilds only after a source change.
# Dangling images a rebuild leaves are pruned, so the data root does not grow without bound.
set -euo pipefail
py=$1
repo=${2:-fitgate}
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../../.." && pwd)
cd "$root"
start=$(date +%s)
eval "$("$here/engine.sh")"

base=fitgate-base:bookworm-$(sha256sum "$here/base.sh" | cut -c1-12)
inputs=$( { echo "$base"; sha256sum < "$0"; sha256sum Dockerfile .dockerignore pyproject.toml setup.py README.md LICENSE;
           find fitcore admission -type f \( -name '*.py' -o -name '*.pyx' -o -name '*.pxd' \
             -o -name '*.pyi' -o -name '*.json' -o -name 'py.typed' \) -print0 | sort -z \
             | xargs -0 sha256sum; } | sha256sum | cut -c1-12)
tag=$repo:src-$inputs
if docker image inspect "$tag" >/dev/null 2>&1; then
    docker tag "$tag" "$repo:latest"
    echo "image: $tag is up to date ($(( $(date +%s) - start ))s)"
    exit 0
fi

"$here/base.sh" "$base"
t_base=$(date +%s)

wheels=build/wheelhouse
rm -rf "$wheels"
mkdir -p "$wheels"
# The host's pip (and its CA trust) fetches and builds; the image build never does.
"$py" -m pip wheel --quiet --disable-pip-version-check --wheel-dir "$wheels" . pip
t_wheels=$(date +%s)

# Also after a failed build: the labelled leftovers (intermediate images of both stages)
# go; --force-rm removes the failed step's container.
trap 'docker image prune --force --filter "label=org.fitgate.image=1" >/dev/null || true' EXIT
DOCKER_BUILDKIT=0 docker build --quiet --force-rm --build-arg "PYTHON_IMAGE=$base" \
    -t "$tag" -t "$repo:latest" . >/dev/null
# Earlier src-* tags of this repository: keep only the current one.
docker image ls --format '{{.Repository}}:{{.Tag}}' "$repo" | grep ":src-" | grep -vx "$tag" \
    | xargs -r docker image rm >/dev/null || true
# Pruned (EXIT trap): only images carrying the Dockerfile's label, so a user's own
# dangling images are left alone.
end=$(date +%s)
size=$(docker image inspect -f '{{.Size}}' "$tag")
echo "image: built $tag in $(( end - start ))s (base $(( t_base - start ))s, wheels" \
     "$(( t_wheels - t_base ))s, docker build $(( end - t_wheels ))s); size $(( size / 1000000 )) MB"
