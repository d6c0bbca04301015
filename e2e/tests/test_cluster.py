"""The local cluster's own promises: the APIs it serves and the fake driver's knobs."""

from __future__ import annotations

import time

import pytest

from e2e import builders, harness

pytestmark = [pytest.mark.e2e]


@pytest.mark.timeout(60)
async def test_workload_api_v1alpha2_is_served(e2e: harness.Harness) -> None:
    workload = {
        "apiVersion": "scheduling.k8s.io/v1alpha2", "kind": "Workload",
        "metadata": {"name": "gang", "namespace": e2e.namespace},
        "spec": {"podGroupTemplates": [{
            "name": "workers", "schedulingPolicy": {"gang": {"minCount": 2}}}]},
    }
    await e2e.kube.create(workload)
    got = await e2e.kube.get("scheduling.k8s.io/v1alpha2", "Workload", "gang", e2e.namespace)
    assert got is not None
    assert got["spec"]["podGroupTemplates"][0]["schedulingPolicy"]["gang"]["minCount"] == 2


@pytest.mark.timeout(120)
async def test_fake_driver_publishes_slow_nodes_late(e2e: harness.Harness) -> None:
    start = time.monotonic()
    nodes = await e2e.create_node_pool("slow", 1, builders.gpu_devices(2), delay_seconds=4)
    assert await e2e.slices_of(nodes[0]) == [], "a slow node published before its delay"
    slices = await e2e.wait_slices(nodes, timeout=30)
    assert time.monotonic() - start >= 4
    assert [d["name"] for d in slices[nodes[0]][0]["spec"]["devices"]] == ["gpu-0", "gpu-1"]


@pytest.mark.timeout(120)
async def test_fake_driver_faulty_nodes_publish_other_devices(e2e: harness.Harness) -> None:
    promised = builders.gpu_devices(4, per_pcie_root=2)
    broken = builders.gpu_devices(4, per_pcie_root=1)  # every GPU on its own root
    nodes = await e2e.create_node_pool("wrong", 1, promised, faulty_devices=broken,
                                       faulty_nodes="all")
    slices = await e2e.wait_slices(nodes)
    published = slices[nodes[0]][0]["spec"]["devices"]
    assert published == broken and published != promised
