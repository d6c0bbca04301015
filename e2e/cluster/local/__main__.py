"""Command line for the local control plane: ``python -m e2e.cluster.local COMMAND``.

- ``build``: build and cache every binary (warm: prints that nothing was needed).
- ``up``: start the cluster, print the KUBECONFIG, and stay in the foreground until
  Ctrl-C / SIGTERM (or ``--for SECONDS``), then tear everything down.
- ``down``: end processes a crashed run recorded in the work directory.
"""

from __future__ import annotations

import argparse
import pathlib
import signal
import sys
import time

from e2e import harness
from e2e.cluster.local import build, cluster, processes

MAX_UP_S = 24 * 3600


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m e2e.cluster.local")
    parser.add_argument("command", choices=["build", "up", "down"])
    parser.add_argument("--workdir", type=pathlib.Path, default=cluster.default_workdir())
    parser.add_argument("--for", dest="duration", type=float, default=MAX_UP_S,
                        help="with up: stop after this many seconds")
    args = parser.parse_args(argv)
    if args.command == "build":
        build.ensure()
        return 0
    if args.command == "down":
        ended = processes.kill_recorded(args.workdir)
        print("ended: " + (", ".join(ended) if ended else "nothing was running"))
        return 0
    stop = False

    def on_signal(*_: object) -> None:
        nonlocal stop
        stop = True

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    with cluster.LocalCluster(args.workdir, node_groups=(harness.GPU_NODE_GROUP,)) as local:
        print(f"export KUBECONFIG={local.kubeconfig}", flush=True)
        deadline = time.monotonic() + min(args.duration, MAX_UP_S)
        while not stop and time.monotonic() < deadline:
            local.check_alive()
            time.sleep(1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
