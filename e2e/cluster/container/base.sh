#!/bin/sh
# The image's base, from Debian packages (no registry needed): a bookworm minbase root
# filesystem with Python 3.11 made by mmdebstrap, then `docker import`ed.
#
#   e2e/cluster/container/base.sh <tag>
#
# mmdebstrap is installed with apt-get if missing. The tag should carry a hash of this
# file (e2e/image.mk does that), so a changed package list makes a new base; an existing
# tag is reused as is.
set -eu
tag=$1
if docker image inspect "$tag" >/dev/null 2>&1; then
    exit 0
fi
if ! command -v mmdebstrap >/dev/null 2>&1; then
    echo "# installing mmdebstrap (apt-get)" >&2
    DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends mmdebstrap >&2
fi
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
# ca-certificates: fitgate talks TLS to the API server; tzdata and netbase for the runtime.
# --dpkgopt/--aptopt keep docs and apt lists out of the image.
mmdebstrap --variant=minbase --quiet \
    --include=python3,python3-venv,ca-certificates,netbase,tzdata \
    --dpkgopt='path-exclude=/usr/share/doc/*' \
    --dpkgopt='path-exclude=/usr/share/man/*' \
    --dpkgopt='path-exclude=/usr/share/locale/*' \
    --customize-hook='rm -rf "$1"/var/lib/apt/lists/* "$1"/var/cache/apt/*' \
    bookworm "$tmp/rootfs.tar"
docker import --change 'CMD ["/bin/sh"]' "$tmp/rootfs.tar" "$tag" >/dev/null
echo "# base image $tag: $(docker image inspect -f '{{.Size}}' "$tag") bytes" >&2
