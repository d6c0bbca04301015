"""``python -m e2e.cluster.kind build|up|down [--name NAME]``: the offline kind cluster.

- ``build``: build (warm: reuse) the node image and print its tag.
- ``up``: build, create the cluster and print its kubeconfig path (it stays up).
- ``down``: delete the cluster.
"""

from __future__ import annotations

import argparse
import pathlib

from e2e.cluster.kind import cluster


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m e2e.cluster.kind")
    parser.add_argument("command", choices=["build", "up", "down"])
    parser.add_argument("--name", default="fitgate")
    parser.add_argument("--workdir", type=pathlib.Path,
                        default=pathlib.Path("/tmp/fitgate-kind"))
    args = parser.parse_args(argv)
    env = cluster.engine_env()
    if args.command == "build":
        print(cluster.build_node_image(env))
        return 0
    image = cluster.build_node_image(env) if args.command == "up" else ""
    kc = cluster.KindCluster(args.name, args.workdir / args.name, env, image)
    if args.command == "down":
        kc.delete()
        return 0
    kc.create()
    print(kc.kubeconfig)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
