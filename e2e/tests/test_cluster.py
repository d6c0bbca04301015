"""The local cluster's own promises: the APIs it serves and the fake driver's knobs."""

from __future__ import annotations

import datetime
from typing import Any

import pytest

from e2e import builders, harness, kube
from e2e.cluster.local import cluster

pytestmark = [pytest.mark.e2e]


@pytest.mark.timeout(60)
async def test_workload_api_is_served(e2e: harness.Harness) -> None:
    """scheduling.k8s.io Workload: v1alpha2 on Kubernetes 1.36, v1beta1 on 1.37."""
    api = cluster.kube_profile().workload_api
    workload = {
        "apiVersion": api, "kind": "Workload",
        "metadata": {"name": "gang", "namespace": e2e.namespace},
        "spec": {"podGroupTemplates": [{
            "name": "workers", "schedulingPolicy": {"gang": {"minCount": 2}}}]},
    }
    await e2e.kube.create(workload)
    got = await e2e.kube.get(api, "Workload", "gang", e2e.namespace)
    assert got is not None
    assert got["spec"]["podGroupTemplates"][0]["schedulingPolicy"]["gang"]["minCount"] == 2


def _timestamp(obj: dict[str, Any]) -> datetime.datetime:
    return datetime.datetime.fromisoformat(obj["metadata"]["creationTimestamp"])


@pytest.mark.timeout(120)
async def test_fake_driver_publishes_slow_nodes_late(e2e: harness.Harness) -> None:
    # Judged by the API server's own timestamps, not by when this test looks: however
    # long the node takes to turn Ready, its slice must come `delay` after the node.
    delay = 4
    nodes = await e2e.create_node_pool("slow", 1, builders.gpu_devices(2),
                                       delay_seconds=delay, wait=False)
    await e2e.wait_nodes_ready(nodes)
    slices = await e2e.wait_slices(nodes, timeout=30)
    node = await e2e.kube.get("v1", "Node", nodes[0])
    assert node is not None
    published = slices[nodes[0]][0]
    # Whole seconds on both sides: a delay of d whole seconds shows as >= d.
    assert (_timestamp(published) - _timestamp(node)).total_seconds() >= delay
    assert [d["name"] for d in published["spec"]["devices"]] == ["gpu-0", "gpu-1"]


@pytest.mark.timeout(120)
async def test_fake_driver_faulty_nodes_publish_other_devices(e2e: harness.Harness) -> None:
    promised = builders.gpu_devices(4, per_pcie_root=2)
    broken = builders.gpu_devices(4, per_pcie_root=1)  # every GPU on its own root
    nodes = await e2e.create_node_pool("wrong", 1, promised, faulty_devices=broken,
                                       faulty_nodes="all")
    slices = await e2e.wait_slices(nodes)
    published = slices[nodes[0]][0]["spec"]["devices"]
    assert published == broken and published != promised


@pytest.mark.timeout(120)
async def test_kueue_holds_an_admission_gated_job_until_the_gate_is_removed(
        e2e: harness.Harness) -> None:
    gate = "kueue.x-k8s.io/admission-gated-by"
    await e2e.create_node_pool("gated", 1, builders.gpu_devices(1))
    queue = await e2e.create_queues(f"cq-{e2e.namespace}")
    job = builders.job("held", e2e.namespace, queue)
    job["metadata"]["annotations"] = {gate: "fitgate.io/verify"}
    await e2e.kube.create(job)

    async def gated() -> dict[str, Any] | None:
        wl = await e2e.workload_of_job("held")
        cond = kube.condition(wl, "QuotaReserved")
        return wl if cond and cond.get("reason") == "AdmissionGated" else None
    wl = await e2e.wait_for(gated, 60, "Kueue reports the Workload AdmissionGated")
    assert not kube.has_condition(wl, "Admitted")

    await e2e.kube.patch("batch/v1", "Job", "held", {"metadata": {"annotations": {gate: None}}},
                         namespace=e2e.namespace)

    async def admitted() -> bool:
        return kube.has_condition(await e2e.workload_of_job("held"), "Admitted")
    await e2e.wait_for(admitted, 60, "the Workload admitted once the gate is gone")
