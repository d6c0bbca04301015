#!/bin/sh
# A container engine for fitgate's image build and tests (test infrastructure).
#
#   . e2e/cluster/container/engine.sh     (or: eval "$(e2e/cluster/container/engine.sh)")
#
# If `docker info` works as the user has it set up, that Docker is used and nothing is
# changed. Otherwise Debian's docker.io is installed (apt-get, root) if dockerd is missing,
# and a PRIVATE dockerd is started with its socket, data root, exec root and config under
# $FITGATE_CACHE/docker, with runc-capdrop (next to this file, copied into that directory:
# the daemon outlives the checkout that started it) as its default runtime, so that
# privileged containers start on hosts whose capability bounding set is partial. A running
# private daemon configured with another shim path is restarted.
# The user's /etc/docker and /var/run/docker.sock are never touched. Prints the
# `export DOCKER_HOST=...` line to use (empty when the user's Docker works).
# Stop the private daemon with: e2e/cluster/container/engine.sh stop
set -eu
here=$(cd "$(dirname "$0")" && pwd)
cache=${FITGATE_CACHE:-$HOME/.cache/fitgate}
dir=$cache/docker
sock=$dir/docker.sock
export DOCKER_HOST=unix://$sock

if [ "${1:-}" = stop ]; then
    if [ -f "$dir/dockerd.pid" ]; then
        kill "$(cat "$dir/dockerd.pid")" 2>/dev/null || true
        rm -f "$dir/dockerd.pid"
    fi
    exit 0
fi

if [ -z "${FITGATE_PRIVATE_DOCKER:-}" ] && env -u DOCKER_HOST docker info >/dev/null 2>&1; then
    echo "# container engine: the user's Docker" >&2
    exit 0
fi
shim=$dir/runc-capdrop
mkdir -p "$dir"
if ! cmp -s "$here/runc-capdrop" "$shim"; then
    cp "$here/runc-capdrop" "$shim.tmp" && chmod 0755 "$shim.tmp" && mv "$shim.tmp" "$shim"
fi
if docker info >/dev/null 2>&1; then
    if grep -q "\"path\": \"$shim\"" "$dir/daemon.json" 2>/dev/null; then
        echo "export DOCKER_HOST=$DOCKER_HOST"
        exit 0
    fi
    echo "# container engine: restarting the private dockerd (its runtime is not $shim)" >&2
    pid=$(cat "$dir/dockerd.pid" 2>/dev/null || true)
    [ -n "$pid" ] && kill "$pid" 2>/dev/null || true
    i=0
    while docker info >/dev/null 2>&1 || { [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null; }; do
        i=$((i + 1))
        if [ "$i" -gt 60 ]; then
            echo "private dockerd did not stop within 60 s" >&2
            exit 1
        fi
        sleep 1
    done
fi
if ! command -v dockerd >/dev/null 2>&1; then
    echo "# container engine: installing Debian's docker.io (apt-get)" >&2
    DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends docker.io >&2
fi
mkdir -p "$dir/root" "$dir/exec"
# A pid file whose process is gone (a daemon killed or stopping) would refuse the start.
if [ -f "$dir/dockerd.pid" ] && ! kill -0 "$(cat "$dir/dockerd.pid")" 2>/dev/null; then
    rm -f "$dir/dockerd.pid"
fi
cat > "$dir/daemon.json" <<JSON
{
  "runtimes": {"fitgate-runc": {"path": "$shim"}},
  "default-runtime": "fitgate-runc",
  "storage-driver": "overlay2",
  "log-driver": "json-file",
  "log-opts": {"max-size": "10m", "max-file": "2"}
}
JSON
echo "# container engine: starting a private dockerd ($sock)" >&2
# setsid: the daemon outlives the make/pytest process that started it (stop: see above).
setsid dockerd --config-file "$dir/daemon.json" --host "$DOCKER_HOST" \
    --data-root "$dir/root" --exec-root "$dir/exec" --pidfile "$dir/dockerd.pid" \
    >"$dir/dockerd.log" 2>&1 < /dev/null &
i=0
until docker info >/dev/null 2>&1; do
    i=$((i + 1))
    if [ "$i" -gt 60 ]; then
        echo "private dockerd did not answer within 60 s; log: $dir/dockerd.log" >&2
        tail -20 "$dir/dockerd.log" >&2
        exit 1
    fi
    sleep 1
done
echo "export DOCKER_HOST=$DOCKER_HOST"
