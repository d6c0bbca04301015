"""Session fixtures: a running cluster, its kubeconfig, and a per-test harness.

By default the session starts the local control plane (``e2e/cluster/local``) once and
tears it down at the end, also on failure or interrupt (fixture finalizer plus an atexit
guard; the processes are in their own process groups and are killed by pid). Set
``FITGATE_E2E_KUBECONFIG`` to run the same tests against an existing cluster instead
(for instance the kind profile in ``e2e/cluster/kind``).

The binaries must be built before pytest starts (``make e2e`` does it; see e2e.mk), so
that no test timeout covers a cold build. Startup itself is bounded per component.

When a test fails, ``pytest_runtest_makereport`` adds a "fitgate e2e diagnostics"
section to its report (``diagnostics.report``): the conditions of the Workloads,
ProvisioningRequests and Pods in its namespace, its events, and the end of every
component's and test process's log.

After each test: components the test stopped (``local.stop_component``) are started
again, the harness deletes what the test made and what the autoscaler added for it, and
the cluster must still be whole (``check_alive``).
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

from e2e import diagnostics, harness, kube
from e2e.cluster.local import cluster
from e2e.scenarios import peers, topology

_CLUSTER = pytest.StashKey["ClusterInfo"]()
_HARNESS = pytest.StashKey[harness.Harness]()


@dataclasses.dataclass(frozen=True)
class ClusterInfo:
    kubeconfig: pathlib.Path
    local: cluster.LocalCluster | None  # None when the cluster is external


@pytest.fixture(scope="session")
def e2e_cluster(request: pytest.FixtureRequest) -> Iterator[ClusterInfo]:
    external = os.environ.get("FITGATE_E2E_KUBECONFIG")
    if external:
        info = ClusterInfo(pathlib.Path(external), None)
        request.config.stash[_CLUSTER] = info
        yield info
        return
    local = cluster.LocalCluster(cluster.default_workdir(), node_groups=NODE_GROUPS)
    atexit.register(local.stop)
    # SIGTERM (a CI time-out, say) would end Python without running finalizers: turn it
    # into KeyboardInterrupt, which pytest handles by tearing down fixtures.
    previous = signal.signal(signal.SIGTERM, _interrupt)
    try:
        local.start()
        info = ClusterInfo(local.kubeconfig, local)
        request.config.stash[_CLUSTER] = info
        yield info
    finally:
        local.stop()
        atexit.unregister(local.stop)
        signal.signal(signal.SIGTERM, previous)


# The node groups cluster-autoscaler may grow: the shared GPU pool, scenario 1's cheap
# and dear groups (e2e/scenarios/topology.py) and the peers comparison's
# (e2e/scenarios/peers.py).
NODE_GROUPS = (harness.GPU_NODE_GROUP, *topology.NODE_GROUPS, *peers.NODE_GROUPS)


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
def local_cluster(e2e_cluster: ClusterInfo) -> cluster.LocalCluster:
    """The local cluster (token_for, fault methods); skips the test on an external one."""
    if e2e_cluster.local is None:
        pytest.skip("needs the local cluster (FITGATE_E2E_KUBECONFIG is set)")
    return e2e_cluster.local


@pytest.fixture
async def e2e(kube_client: kube.Kube, e2e_cluster: ClusterInfo,
              request: pytest.FixtureRequest) -> AsyncIterator[harness.Harness]:
    """A harness bound to a fresh namespace, cleaned up after the test."""
    if e2e_cluster.local is not None:
        e2e_cluster.local.check_alive()
    name = f"e2e-{uuid.uuid4().hex[:8]}"
    await kube_client.create({"apiVersion": "v1", "kind": "Namespace",
                              "metadata": {"name": name}})

    async def default_sa() -> bool:
        return await kube_client.get("v1", "ServiceAccount", "default", name) is not None
    # kube-controller-manager's ServiceAccount controller makes it; after a test restarted
    # kube-apiserver, its watches come back with client-go's backoff, which measured over
    # 30 s on a loaded machine.
    await kube.wait_for(default_sa, 120, f"default ServiceAccount in {name}")
    node_groups = (e2e_cluster.local.node_groups if e2e_cluster.local is not None
                   else (harness.GPU_NODE_GROUP,))
    h = harness.Harness(kube_client, name, local=e2e_cluster.local, node_groups=node_groups)
    request.node.stash[_HARNESS] = h
    try:
        yield h
    finally:
        if e2e_cluster.local is not None:
            e2e_cluster.local.start_stopped()
        try:
            await h.cleanup()
        finally:
            if e2e_cluster.local is not None:
                e2e_cluster.local.check_alive()


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]
                              ) -> Iterator[None]:
    """On a failed test (setup or body), attach the cluster's diagnostics to its report."""
    outcome = yield
    report = outcome.get_result()  # type: ignore[attr-defined]
    if not report.failed or report.when not in ("setup", "call"):
        return
    info = item.config.stash.get(_CLUSTER, None)
    if info is None:
        return
    h = item.stash.get(_HARNESS, None)
    text = diagnostics.report(info.local, info.kubeconfig, h.namespace if h else None,
                              h.processes if h else ())
    report.sections.append(("fitgate e2e diagnostics", text))
