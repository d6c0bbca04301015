"""Session fixtures: a running cluster, its kubeconfig, and a per-test harness.

By default the session starts the local control plane (``e2e/cluster/local``) once and
tears it down at the end, also on failure or interrupt (fixture finalizer plus an atexit
guard; the processes are in their own process groups and are killed by pid). Set
``FITGATE_E2E_KUBECONFIG`` to run the same tests against an existing cluster instead
(for instance the kind profile in ``e2e/cluster/kind``).

The binaries must be built before pytest starts (``make e2e`` does it; see e2e.mk), so
that no test timeout covers a cold build. Startup itself is bounded per component.
"""

from __future__ import annotations

import atexit
import dataclasses
import os
import pathlib
import signal
import uuid
from collections.abc import AsyncIterator, Iterator

import pytest
from kubernetes_asyncio import config

from e2e import harness, kube
from e2e.cluster.local import cluster


@dataclasses.dataclass(frozen=True)
class ClusterInfo:
    kubeconfig: pathlib.Path
    local: cluster.LocalCluster | None  # None when the cluster is external


@pytest.fixture(scope="session")
def e2e_cluster() -> Iterator[ClusterInfo]:
    external = os.environ.get("FITGATE_E2E_KUBECONFIG")
    if external:
        yield ClusterInfo(pathlib.Path(external), None)
        return
    local = cluster.LocalCluster(cluster.default_workdir(), node_groups=(harness.GPU_NODE_GROUP,))
    atexit.register(local.stop)
    # SIGTERM (a CI time-out, say) would end Python without running finalizers: turn it
    # into KeyboardInterrupt, which pytest handles by tearing down fixtures.
    previous = signal.signal(signal.SIGTERM, _interrupt)
    try:
        local.start()
        yield ClusterInfo(local.kubeconfig, local)
    finally:
        local.stop()
        atexit.unregister(local.stop)
        signal.signal(signal.SIGTERM, previous)


def _interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt(f"signal {signum}")


@pytest.fixture(scope="session")
def kubeconfig(e2e_cluster: ClusterInfo) -> pathlib.Path:
    return e2e_cluster.kubeconfig


@pytest.fixture
async def kube_client(kubeconfig: pathlib.Path) -> AsyncIterator[kube.Kube]:
    api = await config.new_client_from_config(config_file=str(kubeconfig))
    async with api:
        yield kube.Kube(api)


@pytest.fixture
async def e2e(kube_client: kube.Kube, e2e_cluster: ClusterInfo
              ) -> AsyncIterator[harness.Harness]:
    """A harness bound to a fresh namespace, cleaned up after the test."""
    if e2e_cluster.local is not None:
        e2e_cluster.local.check_alive()
    name = f"e2e-{uuid.uuid4().hex[:8]}"
    await kube_client.create({"apiVersion": "v1", "kind": "Namespace",
                              "metadata": {"name": name}})

    async def default_sa() -> bool:
        return await kube_client.get("v1", "ServiceAccount", "default", name) is not None
    await kube.wait_for(default_sa, 30, f"default ServiceAccount in {name}")
    h = harness.Harness(kube_client, name)
    try:
        yield h
    finally:
        await h.cleanup()
        await kube_client.delete("v1", "Namespace", name)
        if e2e_cluster.local is not None:
            e2e_cluster.local.check_alive()
