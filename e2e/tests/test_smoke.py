"""Smoke test of the local control plane: the real components, end to end.

1. kwok nodes publish GPU ResourceSlices (fake DRA driver, 4 GPUs, 2 per PCIe root).
2. A Job with a ResourceClaimTemplate for 2 GPUs on one PCIe root, queued through a
   LocalQueue/ClusterQueue, is admitted by Kueue, scheduled by kube-scheduler with the
   claim allocated to matching devices, Running — and stays Running until the test lets
   it finish.
3. A ProvisioningRequest for the kwok node group is acted on by cluster-autoscaler,
   which adds nodes; the new nodes publish their shape's slices.
"""

from __future__ import annotations

from typing import Any

import pytest

from e2e import builders, harness, kube
from e2e.cluster.local import cluster

pytestmark = [pytest.mark.e2e]

RESOURCE = "resource.k8s.io/v1"


def _device_roots(slices: list[dict[str, Any]]) -> dict[tuple[str, str, str], str]:
    """(driver, pool, device) -> PCIe root, from ResourceSlices."""
    out = {}
    for s in slices:
        spec = s["spec"]
        for dev in spec.get("devices", []):
            root = dev.get("attributes", {}).get(builders.PCIE_ROOT, {}).get("string", "")
            out[(spec["driver"], spec["pool"]["name"], dev["name"])] = root
    return out


@pytest.mark.timeout(300)
async def test_job_with_gpu_claim_is_admitted_allocated_and_running(
        e2e: harness.Harness) -> None:
    nodes = await e2e.create_node_pool("smoke-gpu", 2, builders.gpu_devices(4, per_pcie_root=2))
    queue = await e2e.create_queues(f"cq-{e2e.namespace}")
    await e2e.kube.create(builders.claim_template(
        "two-gpus-one-root", e2e.namespace, 2, match_attribute=builders.PCIE_ROOT))
    # Pinned to this pool: other tests' node groups publish GPUs too.
    await e2e.create_job("train", queue, claim_template_name="two-gpus-one-root",
                         node_selector={cluster.SHAPE_LABEL: "smoke-gpu"})

    # Kueue: a Workload for the Job, admitted; the Job unsuspended.
    async def admitted() -> dict[str, Any] | None:
        wl = await e2e.workload_of_job("train")
        return wl if kube.has_condition(wl, "Admitted") else None
    await e2e.wait_for(admitted, 60, "Kueue admits the Job's Workload")
    job = await e2e.kube.get("batch/v1", "Job", "train", e2e.namespace)
    assert job is not None and not job["spec"].get("suspend")

    # kube-scheduler: the pod bound to one of our nodes, its claim allocated; kwok: Running.
    async def running_pod() -> dict[str, Any] | None:
        pods = await e2e.pods_of_job("train")
        return pods[0] if pods and pods[0].get("status", {}).get("phase") == "Running" else None
    pod = await e2e.wait_for(running_pod, 90, "the Job's pod Running")
    assert pod["spec"]["nodeName"] in nodes

    claim_name = pod["status"]["resourceClaimStatuses"][0]["resourceClaimName"]
    claim = await e2e.kube.get(RESOURCE, "ResourceClaim", claim_name, e2e.namespace)
    assert claim is not None
    results = claim["status"]["allocation"]["devices"]["results"]
    assert len(results) == 2
    roots = _device_roots(await e2e.slices_of(pod["spec"]["nodeName"]))
    allocated = [roots[(r["driver"], r["pool"], r["device"])] for r in results]
    assert allocated[0] and allocated[0] == allocated[1], f"devices on roots {allocated}"
    reserved = [ref["name"] for ref in claim["status"].get("reservedFor", [])]
    assert pod["metadata"]["name"] in reserved

    # Job pods keep running until the test finishes them (kwok does not complete them).
    still = await e2e.kube.get("v1", "Pod", pod["metadata"]["name"], e2e.namespace)
    assert still is not None and still["status"]["phase"] == "Running"
    await e2e.finish_pods([pod])

    async def job_complete() -> bool:
        j = await e2e.kube.get("batch/v1", "Job", "train", e2e.namespace)
        return kube.has_condition(j, "Complete")
    await e2e.wait_for(job_complete, 60, "the Job Complete after its pod finished")


@pytest.mark.timeout(300)
async def test_provisioning_request_scales_up_kwok_node_group(e2e: harness.Harness) -> None:
    group = harness.GPU_NODE_GROUP
    selector = f"{cluster.NODEGROUP_LABEL}={group.name}"
    before = await e2e.kube.list("v1", "Node", label_selector=selector)
    # Pods of 20 CPUs on 32-CPU nodes: one per node. Ask for two more pods than the group
    # has nodes already (earlier tests may have grown it): it must grow by two.
    count = len(before) + 2
    spec = builders.pod_spec(cpu="20", node_selector={cluster.NODEGROUP_LABEL: group.name})
    await e2e.kube.create(builders.pod_template("gang", e2e.namespace, spec))
    await e2e.kube.create(builders.provisioning_request("gang", e2e.namespace, "gang", count))

    async def provisioned() -> dict[str, Any] | None:
        pr = await e2e.kube.get(builders.AUTOSCALING, "ProvisioningRequest", "gang",
                                e2e.namespace)
        return pr if kube.has_condition(pr, "Provisioned") else None
    pr = await e2e.wait_for(provisioned, 120, "cluster-autoscaler provisions the request")
    assert kube.has_condition(pr, "Accepted")

    async def grown() -> list[dict[str, Any]] | None:
        nodes = await e2e.kube.list("v1", "Node",
                                    label_selector=f"{cluster.NODEGROUP_LABEL}={group.name}")
        return nodes if len(nodes) >= len(before) + 2 else None
    nodes = await e2e.wait_for(grown, 60, "two new nodes in the kwok node group")
    new = [n["metadata"]["name"] for n in nodes
           if n["metadata"]["name"] not in {b["metadata"]["name"] for b in before}]
    await e2e.wait_nodes_ready(new)
    slices = await e2e.wait_slices(new)
    assert all(len(s[0]["spec"]["devices"]) == 4 for s in slices.values())
