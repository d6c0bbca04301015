"""Karpenter on the local control plane: a pending pod makes it launch a NodeClaim that
becomes a Ready kwok node, with the ResourceSlices of its shape (fake DRA driver)."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from typing import Any, TypeVar

import pytest
import yaml

from e2e import builders, dra_driver
from e2e.cluster.local import cluster

pytestmark = [pytest.mark.e2e]

T = TypeVar("T")
SHAPE = "kwok-gpu-one-root"
POOL = "gpu-one-root"


def wait(what: str, check: Callable[[], T | None], timeout: float, local: cluster.LocalCluster
         ) -> T:
    """Poll `check` until it returns a value (bounded); fail naming `what`."""
    deadline = time.monotonic() + timeout
    while True:
        local.check_alive()
        got = check()
        if got is not None:
            return got
        if time.monotonic() > deadline:
            raise AssertionError(f"{what}: not within {timeout:.0f}s")
        time.sleep(1.0)


def get_json(local: cluster.LocalCluster, *args: str) -> Any:
    proc = local.kubectl("get", *args, "-o", "json", check=False)
    return json.loads(proc.stdout) if proc.returncode == 0 else None


def node_pool(name: str, instance_type: str, shape: str) -> dict[str, Any]:
    return {"apiVersion": "karpenter.sh/v1", "kind": "NodePool", "metadata": {"name": name},
            "spec": {"template": {
                "metadata": {"labels": {cluster.SHAPE_LABEL: shape}},
                "spec": {"nodeClassRef": {"group": "karpenter.kwok.sh",
                                          "kind": "KWOKNodeClass",
                                          "name": cluster.KWOK_NODE_CLASS},
                         "requirements": [{"key": "node.kubernetes.io/instance-type",
                                           "operator": "In", "values": [instance_type]}]}},
                "disruption": {"consolidationPolicy": "WhenEmptyOrUnderutilized",
                               "consolidateAfter": "Never"}}}


@pytest.mark.timeout(300)
def test_a_pending_pod_makes_karpenter_launch_a_ready_node_with_slices(
        karpenter_cluster: cluster.LocalCluster) -> None:
    local = karpenter_cluster
    devices = builders.gpu_devices(8, per_pcie_root=8)
    local.apply([
        {"apiVersion": "v1", "kind": "ConfigMap",
         "metadata": {"name": dra_driver.SHAPES_CONFIGMAP,
                      "namespace": cluster.SYSTEM_NAMESPACE},
         "data": {SHAPE: yaml.safe_dump(builders.shape(devices), sort_keys=False)}},
        node_pool(POOL, "gpu-one-root-8x", SHAPE),
        {"apiVersion": "v1", "kind": "Pod",
         "metadata": {"name": "wants-a-node", "namespace": "default"},
         "spec": {"nodeSelector": {cluster.SHAPE_LABEL: SHAPE},
                  "containers": [{"name": "c", "image": "registry.k8s.io/pause:3.10",
                                  "resources": {"requests": {"cpu": "4"}}}]}}])
    started = time.monotonic()

    def initialized() -> dict[str, Any] | None:
        claims = (get_json(local, "nodeclaims") or {}).get("items") or []
        for x in claims:
            conds = {c["type"]: c["status"] for c in (x.get("status") or {}).get(
                "conditions") or []}
            if conds.get("Initialized") == "True":
                return dict(x)
        return None
    claim = wait("an initialized NodeClaim", initialized, 180, local)
    assert claim["metadata"]["labels"]["karpenter.sh/nodepool"] == POOL
    node_name = claim["status"]["nodeName"]
    node = get_json(local, "node", node_name)
    assert node["metadata"]["labels"]["node.kubernetes.io/instance-type"] == "gpu-one-root-8x"
    assert node["metadata"]["labels"][cluster.SHAPE_LABEL] == SHAPE
    assert {c["type"]: c["status"] for c in node["status"]["conditions"]}["Ready"] == "True"
    node_ready = time.monotonic() - started

    def slices() -> list[dict[str, Any]] | None:
        items = (get_json(local, "resourceslices") or {}).get("items") or []
        mine = [s for s in items if s["spec"].get("nodeName") == node_name]
        return mine or None
    (published,) = wait(f"the ResourceSlices of {node_name}", slices, 60, local)
    assert [d["name"] for d in published["spec"]["devices"]] == [
        d["name"] for d in devices]

    def running() -> str | None:
        pod = get_json(local, "pod", "wants-a-node", "-n", "default") or {}
        phase = (pod.get("status") or {}).get("phase")
        return phase if phase == "Running" else None
    wait("the pod Running", running, 60, local)
    print(f"\n[karpenter] NodeClaim {claim['metadata']['name']} -> node {node_name}: "
          f"initialized {node_ready:.1f}s, pod Running {time.monotonic() - started:.1f}s "
          "after the pod was created")
