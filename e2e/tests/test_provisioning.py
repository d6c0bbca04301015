"""Kueue's ProvisioningRequest admission check against the real cluster-autoscaler.

A ClusterQueue with Kueue's built-in provisioning check: a Job that fits no existing node
gets quota, Kueue creates a ProvisioningRequest, cluster-autoscaler (kwok provider) adds
nodes and marks it Provisioned, the check turns Ready, the Job is admitted and its pods
run on the new nodes. The pods carry no DRA claim: this autoscaler build simulates no DRA
(see e2e/cluster/local/README.md), which is the gap fitgate's own check closes.
"""

from __future__ import annotations

from typing import Any

import pytest

from e2e import builders, harness, kube
from e2e.cluster.local import cluster

pytestmark = [pytest.mark.e2e]


@pytest.mark.timeout(300)
async def test_kueue_provisioning_check_scales_up_then_admits(e2e: harness.Harness) -> None:
    group = harness.GPU_NODE_GROUP
    check = await e2e.create_provisioning_check(f"prov-{e2e.namespace}")
    queue = await e2e.create_queues(f"cq-{e2e.namespace}", admission_checks=[check])
    selector = {cluster.NODEGROUP_LABEL: group.name}
    await e2e.create_job("big", queue, parallelism=2, cpu="20", node_selector=selector)

    async def provisioning_request() -> dict[str, Any] | None:
        prs = await e2e.kube.list(builders.AUTOSCALING, "ProvisioningRequest", e2e.namespace)
        return prs[0] if prs else None
    pr = await e2e.wait_for(provisioning_request, 60, "Kueue creates a ProvisioningRequest")
    assert pr["spec"]["podSets"][0]["count"] == 2

    async def admitted() -> dict[str, Any] | None:
        wl = await e2e.workload_of_job("big")
        return wl if kube.has_condition(wl, "Admitted") else None
    wl = await e2e.wait_for(admitted, 180, "the provisioning check Ready and the Job admitted")
    states = {c["name"]: c["state"] for c in wl["status"]["admissionChecks"]}
    assert states == {check: "Ready"}

    async def running() -> list[dict[str, Any]] | None:
        pods = await e2e.pods_of_job("big")
        ok = len(pods) == 2 and all(p["status"].get("phase") == "Running" for p in pods)
        return pods if ok else None
    pods = await e2e.wait_for(running, 90, "both pods Running on the new nodes")
    hosts = {p["spec"]["nodeName"] for p in pods}
    assert len(hosts) == 2 and all(h.startswith(group.name) for h in hosts)
    await e2e.finish_pods(pods)
