#!/usr/bin/env bash
# Build the upstream allocator table's test binary (table_test.go here, run against
# fitcore) into the cache, outside the repository, and print its path as the last line
# of stdout. The build is skipped when that binary already exists: the path is keyed by
# the allocator module's version and a hash of table_test.go, features.go and this script.
#
# The table (structured/internal/allocatortesting) is internal to
# k8s.io/dynamic-resource-allocation, so the module is copied from the Go module cache into
# a build directory, and table_test.go and the oracle's features.go (package renamed) are
# placed at structured/internal/fitgatetable there. Nothing of it enters the repository.
#
#   FITGATE_ORACLE_KUBE  1.36 (bench/oracle/go.mod, features.go) or 1.37 (bench/oracle/k137/)
#   FITGATE_CACHE        cache root (default ~/.cache/fitgate), shared with the oracle build
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
oracle="$(dirname "$here")"
cache="${FITGATE_CACHE:-$HOME/.cache/fitgate}"
export GOMODCACHE="$cache/gomod"
export GOCACHE="$cache/gocache"
export GOTOOLCHAIN=local  # never download a toolchain; use the installed go
export GOWORK=off
export CGO_ENABLED=0

command -v go >/dev/null || { echo "harness/build.sh: go is not installed" >&2; exit 1; }

kube="${FITGATE_ORACLE_KUBE:-1.36}"
case "$kube" in
    1.36) src="$oracle" ;;
    1.37) src="$oracle/k137" ;;
    *) echo "harness/build.sh: FITGATE_ORACLE_KUBE=$kube: one of 1.36, 1.37" >&2; exit 1 ;;
esac

module=k8s.io/dynamic-resource-allocation
version="$(awk -v m="$module" '$1 == m { print $2 }' "$src/go.mod")"
[ -n "$version" ] || { echo "harness/build.sh: $module not found in $src/go.mod" >&2; exit 1; }
hash="$(cat "$here/table_test.go" "$src/features.go" "$here/build.sh" | sha256sum | cut -c1-12)"
out="$cache/oracle/table-$version-$hash/fitgate-table.test"

if [ -x "$out" ]; then
    echo "harness/build.sh: cached, no build needed (0s)" >&2
else
    start=$(date +%s)
    build="$(dirname "$out")"
    mkdir -p "$build"
    echo "harness/build.sh: building the table harness ($module $version) ..." >&2
    # The module as the proxy serves it (a plain download, outside any module).
    dir="$(cd "$build" && GOFLAGS=-mod=mod go mod download -json "$module@$version" \
        | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p')"
    [ -d "$dir" ] || { echo "harness/build.sh: $module@$version was not downloaded" >&2; exit 1; }
    work="$build/src"
    rm -rf "$work" && mkdir -p "$work" && cp -R "$dir/." "$work/" && chmod -R u+w "$work"
    pkg="$work/structured/internal/fitgatetable"
    mkdir -p "$pkg"
    cp "$here/table_test.go" "$pkg/table_test.go"
    sed 's/^package main$/package fitgatetable/' "$src/features.go" > "$pkg/features.go"
    (cd "$work" && GOFLAGS="-mod=readonly -buildvcs=false" \
        go test -c -trimpath -tags fitgatetable -o "$out.tmp.$$" ./structured/internal/fitgatetable)
    mv -f "$out.tmp.$$" "$out"
    echo "harness/build.sh: built in $(( $(date +%s) - start ))s" >&2
fi
echo "$out"
