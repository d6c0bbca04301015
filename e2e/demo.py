"""``make demo``: fitgate next to its peers at their best, on a real (local) control plane.

1. Builds the local control plane's binaries from Go modules, or reuses them from
   ``$FITGATE_CACHE`` (the cold build prints its progress; see e2e/cluster/local/README.md).
2. Starts the cluster (etcd, kube-apiserver, kube-controller-manager, kube-scheduler,
   kwok, Kueue, cluster-autoscaler with its DRA simulation on, the fake DRA driver) with
   scenario 1's node groups, one pair per baseline.
3. Installs fitgate with its Helm chart and runs ``fitgate serve`` as a local process with
   the chart's ServiceAccount (``e2e/scenarios/fitgate.py``).
4. Runs scenario 1 (topology mismatch) through every baseline of
   ``e2e/scenarios/peers.py`` at once: Kueue's built-in ProvisioningRequest check from
   zero and with one live node per group, no Kueue (pods Pending, the autoscaler growing
   the cluster) from zero and with one live node per group, and fitgate; prints the table.
5. Tears everything down, also on failure or Ctrl-C.

Exit status 0 when every run completed and fitgate's run got the gang Running.
"""

from __future__ import annotations

import argparse
import asyncio
import pathlib
import signal
import sys
import time
import uuid

from kubernetes_asyncio import config

from e2e import harness, kube
from e2e.cluster.local import build, cluster
from e2e.scenarios import figures, fitgate, peers


def say(msg: str) -> None:
    print(f"==> {msg}", flush=True)


async def scenario(local: cluster.LocalCluster, peer_timeout: float) -> list[peers.Cell]:
    api = await config.new_client_from_config(config_file=str(local.kubeconfig))
    async with api:
        client = kube.Kube(api)
        namespace = f"demo-{uuid.uuid4().hex[:6]}"
        await client.create({"apiVersion": "v1", "kind": "Namespace",
                             "metadata": {"name": namespace}})
        h = harness.Harness(client, namespace, local=local)
        fg = fitgate.Fitgate(h, local)
        try:
            say("installing fitgate with its Helm chart; fitgate serve runs as a local "
                "process with the chart's ServiceAccount")
            await fg.install()
            say(f"scenario 1 through every baseline at once (the peers give up after "
                f"{peer_timeout:.0f} s, fitgate after {peers.FITGATE_TIMEOUT_S:.0f} s)")
            cells = await peers.run(h, fitgate.CHECK_NAME, scenarios=("1",),
                                    peer_timeout=peer_timeout)
            for cell in cells:
                say(f"{cell.baseline.title}: {cell.outcome}; bought {cell.bought}")
            return cells
        except BaseException:
            for proc in h.processes:
                print(f"--- {proc.name} ({proc.log_path}):\n{proc.log_tail(60)}",
                      file=sys.stderr)
            raise
        finally:
            await fg.uninstall()
            await h.cleanup()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m e2e.demo", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--workdir", type=pathlib.Path,
                        default=pathlib.Path(__file__).resolve().parent / ".run" / "demo")
    parser.add_argument("--peer-timeout", type=float, default=peers.PEER_TIMEOUT_S,
                        help="seconds each peer's run may take (default %(default)s)")
    args = parser.parse_args(argv)
    started = time.monotonic()
    say("local control plane binaries (a cold build takes about 25-40 minutes and prints "
        "its progress; later runs reuse them)")
    build.ensure()
    local = cluster.LocalCluster(args.workdir / "cluster",
                                 node_groups=peers.node_groups(("1",)), autoscaler_dra=True)
    previous = signal.signal(signal.SIGTERM, _interrupt)
    try:
        say("starting the local cluster")
        local.start()
        cells = asyncio.run(scenario(local, args.peer_timeout))
    finally:
        say("tearing down")
        local.stop()
        signal.signal(signal.SIGTERM, previous)
    print()
    print("Scenario 1: a 4-pod gang, each pod 30 CPUs and 8 GPUs on one PCIe root; the cheap "
          "node group splits its 8 GPUs over two roots; cluster-autoscaler simulates DRA "
          "(--enable-dynamic-resource-allocation=true)")
    print(figures.table([c.row() for c in cells]))
    print(f"\ndemo finished in {time.monotonic() - started:.0f} s")
    ok = all(not c.error for c in cells) and all(
        c.seconds is not None for c in cells if c.baseline.queue == "fitgate")
    return 0 if ok else 1


def _interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt(f"signal {signum}")


if __name__ == "__main__":
    sys.exit(main())
