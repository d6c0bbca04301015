#!/usr/bin/env bash
# The local control plane without containers: build | up | down (see README.md here).
#   e2e/cluster/local/cluster.sh build     # build + cache binaries under $FITGATE_CACHE
#   e2e/cluster/local/cluster.sh up        # run until Ctrl-C; prints KUBECONFIG
#   e2e/cluster/local/cluster.sh down      # end what a crashed run left behind
set -euo pipefail
root="$(cd "$(dirname "$0")/../../.." && pwd)"
py="${PY:-$root/.venv/bin/python}"
[ -x "$py" ] || py=python3
export FITGATE_CACHE="${FITGATE_CACHE:-$HOME/.cache/fitgate}"
cd "$root"
exec "$py" -m e2e.cluster.local "$@"
