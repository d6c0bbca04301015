"""``make demo``: fitgate next to Kueue's built-in ProvisioningRequest check, on a real
(local) control plane.

1. Builds the local control plane's binaries from Go modules, or reuses them from
   ``$FITGATE_CACHE`` (the cold build prints its progress; see e2e/cluster/local/README.md).
2. Starts the cluster (etcd, kube-apiserver, kube-controller-manager, kube-scheduler,
   kwok, Kueue, cluster-autoscaler, the fake DRA driver) with scenario 1's node groups.
3. Installs fitgate with its Helm chart and runs ``fitgate serve`` as a local process with
   the chart's ServiceAccount (``e2e/scenarios/fitgate.py``).
4. Runs scenario 1 (``e2e/scenarios/topology.py``) twice, the built-in check first, and
   prints the comparison table.
5. Tears everything down, also on failure or Ctrl-C.

Exit status 0 when both runs completed and fitgate's run got the gang Running.
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
from e2e.scenarios import figures, fitgate, topology


def say(msg: str) -> None:
    print(f"==> {msg}", flush=True)


async def scenario(local: cluster.LocalCluster, builtin_timeout: float
                   ) -> list[figures.Row]:
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
            say(f"scenario 1 with Kueue's built-in ProvisioningRequest check (gives up "
                f"after {builtin_timeout:.0f} s)")
            builtin = await topology.run_builtin(h, builtin_timeout)
            say(f"built-in check: {builtin.outcome}; nodes {builtin.nodes}")
            say("scenario 1 with fitgate")
            fit = await topology.run_fitgate(h, fitgate.CHECK_NAME)
            say(f"fitgate: {fit.outcome}; nodes {fit.nodes}")
            return [builtin.row(), fit.row()]
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
    parser.add_argument("--builtin-timeout", type=float, default=topology.BUILTIN_TIMEOUT_S)
    args = parser.parse_args(argv)
    started = time.monotonic()
    say("local control plane binaries (a cold build takes about 25-40 minutes and prints "
        "its progress; later runs reuse them)")
    build.ensure()
    local = cluster.LocalCluster(args.workdir / "cluster", node_groups=topology.NODE_GROUPS)
    previous = signal.signal(signal.SIGTERM, _interrupt)
    try:
        say("starting the local cluster")
        local.start()
        rows = asyncio.run(scenario(local, args.builtin_timeout))
    finally:
        say("tearing down")
        local.stop()
        signal.signal(signal.SIGTERM, previous)
    print()
    print("Scenario 1: a 4-pod gang, each pod 8 GPUs on one PCIe root; the cheap node group "
          "splits its 8 GPUs over two roots")
    print(figures.table(rows))
    print(f"\ndemo finished in {time.monotonic() - started:.0f} s")
    return 0 if rows[-1].seconds is not None else 1


def _interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt(f"signal {signum}")


if __name__ == "__main__":
    sys.exit(main())
