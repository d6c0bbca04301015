"""A local control plane with Karpenter (kwok provider) instead of cluster-autoscaler.

Its own cluster, in its own workdir (``e2e/.run/karpenter``, or
``$FITGATE_E2E_KARPENTER_WORKDIR``), started once per module of this directory. Karpenter
is built on first use (``make e2e-karpenter`` builds it before pytest starts, outside any
test timeout). These tests are not part of ``make e2e``: ``make e2e-karpenter`` runs
them, and ``make test`` runs that after ``e2e-1.36``.
"""

from __future__ import annotations

import atexit
import os
import pathlib
import uuid
from collections.abc import AsyncIterator, Iterator

import pytest
from kubernetes_asyncio import config

from e2e import harness, kube
from e2e.cluster.local import cluster
from e2e.karpenter import scenario
from e2e.scenarios import figures

# The instance types Karpenter's kwok provider offers: scenario 1's two GPU nodes, a larger
# node of the same GPUs (the capacity test's fallback, e2e/karpenter/capacity.py), and a
# plain CPU node.
INSTANCE_TYPES = (
    cluster.InstanceType("gpu-split-8x", cpu="32", price=10.0),
    cluster.InstanceType("gpu-one-root-8x", cpu="48", price=14.0),
    cluster.InstanceType("gpu-one-root-8x-xl", cpu="64", price=18.0),
    cluster.InstanceType("cpu-16x", cpu="16", memory="64Gi", price=1.0),
)


def workdir() -> pathlib.Path:
    env = os.environ.get("FITGATE_E2E_KARPENTER_WORKDIR")
    if env:
        return pathlib.Path(env)
    return cluster.default_workdir().parent / "karpenter"


@pytest.fixture(scope="module")
def karpenter_cluster() -> Iterator[cluster.LocalCluster]:
    local = cluster.LocalCluster(workdir(), with_autoscaler=False,
                                 karpenter=cluster.KarpenterSetup(INSTANCE_TYPES))
    atexit.register(local.stop)
    try:
        local.start()
        yield local
    finally:
        local.stop()
        atexit.unregister(local.stop)


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    text = figures.table()
    if text:
        terminalreporter.section("fitgate e2e figures (Karpenter)")
        terminalreporter.write_line(text)


@pytest.fixture
async def karpenter_e2e(karpenter_cluster: cluster.LocalCluster
                        ) -> AsyncIterator[harness.Harness]:
    """A harness on the Karpenter cluster, bound to a fresh namespace."""
    local = karpenter_cluster
    local.check_alive()
    api = await config.new_client_from_config(config_file=str(local.kubeconfig))
    async with api:
        client = kube.Kube(api)
        name = f"e2e-{uuid.uuid4().hex[:8]}"
        await client.create({"apiVersion": "v1", "kind": "Namespace",
                             "metadata": {"name": name}})

        async def default_sa() -> bool:
            return await client.get("v1", "ServiceAccount", "default", name) is not None
        await kube.wait_for(default_sa, 120, f"default ServiceAccount in {name}")
        h = harness.Harness(client, name, local=local)
        try:
            yield h
        finally:
            try:
                await h.cleanup()
            finally:
                scenario.release_nodes(local)
                local.check_alive()
