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

# FITGATE_ORACLE_KUBE picks the Kubernetes minor version: 1.36 (go.mod, features.go here)
# or 1.37 (k137/: its go.mod, go.sum and features.go, with this directory's main.go).
kube="${FITGATE_ORACLE_KUBE:-1.36}"
case "$kube" in
    1.36) src="$here"; files=("$here/go.mod" "$here/go.sum" "$here/main.go" "$here/features.go") ;;
    1.37) src="$here/k137"; files=("$src/go.mod" "$src/go.sum" "$here/main.go" "$src/features.go") ;;
    *) echo "build.sh: FITGATE_ORACLE_KUBE=$kube: one of 1.36, 1.37" >&2; exit 1 ;;
esac

module=k8s.io/dynamic-resource-allocation
version="$(awk -v m="$module" '$1 == m { print $2 }' "$src/go.mod")"
[ -n "$version" ] || { echo "build.sh: $module not found in $src/go.mod" >&2; exit 1; }
hash="$(cat "${files[@]}" | sha256sum | cut -c1-12)"
out="$cache/oracle/$version-$hash/fitgate-oracle"

if [ -x "$out" ]; then
    echo "build.sh: cached, no build needed (0s)" >&2
else
    start=$(date +%s)
    mkdir -p "$(dirname "$out")"
    echo "build.sh: building fitgate-oracle ($module $version) ..." >&2
    # Build from a copy that holds exactly this version's files (outside the repository).
    work="$(dirname "$out")/src"
    rm -rf "$work" && mkdir -p "$work" && cp "${files[@]}" "$work/"
    (cd "$work" && go mod download && go build -trimpath -o "$out.tmp.$$" .)
    mv -f "$out.tmp.$$" "$out"
    echo "build.sh: built in $(( $(date +%s) - start ))s" >&2
fi
echo "$out"
