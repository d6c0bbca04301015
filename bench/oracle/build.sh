#!/usr/bin/env bash
# Build the upstream-allocator oracle into the cache (outside the repository) and print its
# path as the last line of stdout. The build is skipped when that binary already exists:
# the path is keyed by the allocator module's version and a hash of go.mod, go.sum, main.go.
#
#   FITGATE_CACHE  cache root (default ~/.cache/fitgate); GOMODCACHE and GOCACHE live there too.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
cache="${FITGATE_CACHE:-$HOME/.cache/fitgate}"
export GOMODCACHE="$cache/gomod"
export GOCACHE="$cache/gocache"
export GOTOOLCHAIN=local  # never download a toolchain; use the installed go
export GOFLAGS="-mod=readonly -buildvcs=false"
export CGO_ENABLED=0

command -v go >/dev/null || { echo "build.sh: go is not installed" >&2; exit 1; }

module=k8s.io/dynamic-resource-allocation
version="$(awk -v m="$module" '$1 == m { print $2 }' "$here/go.mod")"
[ -n "$version" ] || { echo "build.sh: $module not found in go.mod" >&2; exit 1; }
hash="$(cat "$here/go.mod" "$here/go.sum" "$here/main.go" | sha256sum | cut -c1-12)"
out="$cache/oracle/$version-$hash/fitgate-oracle"

if [ -x "$out" ]; then
    echo "build.sh: cached, no build needed (0s)" >&2
else
    start=$(date +%s)
    mkdir -p "$(dirname "$out")"
    echo "build.sh: building fitgate-oracle ($module $version) ..." >&2
    (cd "$here" && go mod download && go build -trimpath -o "$out.tmp.$$" .)
    mv -f "$out.tmp.$$" "$out"
    echo "build.sh: built in $(( $(date +%s) - start ))s" >&2
fi
echo "$out"
