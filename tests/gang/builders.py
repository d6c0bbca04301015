"""Builders for gang tests: nodes with GPUs and NICs, Workloads, NodeShapes, as JSON.

DRA objects come from tests/fitcore/builders.py; this adds what a gang needs around them.
"""

from __future__ import annotations

from typing import Any

from tests.fitcore import builders as b

PCIE_ROOT = "resource.kubernetes.io/pcieRoot"
RACK = "topology.example.com/rack"


def _root(value: str) -> dict[str, Any]:
    return {PCIE_ROOT.replace(".", "_dot_").replace("/", "__"): value}


def gpu_devices(n: int = 8, roots: int = 2) -> list[dict[str, Any]]:
    per_root = max(1, n // roots)
    return [b.device(f"gpu-{i}", index=i, **_root(f"pci{i // per_root}")) for i in range(n)]


def nic_devices(roots: list[str]) -> list[dict[str, Any]]:
    return [b.device(f"nic-{i}", **_root(r)) for i, r in enumerate(roots)]


def node(name: str, *, rack: str | None = None, cpu: str = "64", memory: str = "512Gi",
         taints: list[dict[str, str]] | None = None, **labels: str) -> dict[str, Any]:
    all_labels = {"kubernetes.io/hostname": name, **labels}
    if rack is not None:
        all_labels[RACK] = rack
    out: dict[str, Any] = {"apiVersion": "v1", "kind": "Node",
                           "metadata": {"name": name, "labels": all_labels},
                           "status": {"allocatable": {"cpu": cpu, "memory": memory,
                                                      "pods": "110"}}}
    if taints:
        out["spec"] = {"taints": taints}
    return out


def gpu_node(name: str, *, gpus: int = 8, roots: int = 2, nics: list[str] | None = None,
             **kw: Any) -> list[dict[str, Any]]:
    """A Node and its slices: `gpus` GPUs over `roots` PCIe roots, NICs on `nics` roots."""
    out = [node(name, **kw), b.rslice(f"{name}-gpu", gpu_devices(gpus, roots), node=name,
                                      pool=f"{name}-gpu")]
    nic_roots = nics if nics is not None else [f"pci{i}" for i in range(roots)]
    if nic_roots:
        out.append(b.rslice(f"{name}-nic", nic_devices(nic_roots), node=name, driver=b.NIC,
                            pool=f"{name}-nic"))
    return out


def template(name: str = "gpus", *, gpus: int = 4, nic: bool = True,
             namespace: str = "default") -> dict[str, Any]:
    """A ResourceClaimTemplate: `gpus` GPUs (and a NIC) on one PCIe root."""
    requests = [b.req("gpus", count=gpus)]
    if nic:
        requests.append(b.req("nic", "nic"))
    spec = b.claim(name, *requests, match=PCIE_ROOT)["spec"]
    return {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaimTemplate",
            "metadata": {"name": name, "namespace": namespace}, "spec": {"spec": spec}}


def shared_claim(name: str, *requests: dict[str, Any], namespace: str = "default",
                 **kw: Any) -> dict[str, Any]:
    out = b.claim(name, *requests, **kw)
    out["metadata"]["namespace"] = namespace
    return out


def pod_set(name: str = "workers", count: int = 1, *, min_count: int | None = None,
            cpu: str | None = "8", memory: str | None = None, templates: tuple[str, ...] = (),
            shared: tuple[str, ...] = (), topology: str | None = None,
            node_selector: dict[str, str] | None = None,
            tolerations: list[dict[str, str]] | None = None,
            affinity: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    requests = {k: v for k, v in (("cpu", cpu), ("memory", memory)) if v}
    spec: dict[str, Any] = {"containers": [{"name": "main", "resources": {"requests": requests}}]}
    claims = [{"name": t, "resourceClaimTemplateName": t} for t in templates]
    claims += [{"name": s, "resourceClaimName": s} for s in shared]
    if claims:
        spec["resourceClaims"] = claims
    if node_selector:
        spec["nodeSelector"] = node_selector
    if tolerations:
        spec["tolerations"] = tolerations
    if affinity:
        spec["affinity"] = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
            "nodeSelectorTerms": [{"matchExpressions": affinity}]}}}
    tmpl: dict[str, Any] = {"spec": spec}
    if topology:
        tmpl["metadata"] = {"annotations": {"fitgate.io/required-topology": topology}}
    out: dict[str, Any] = {"name": name, "count": count, "template": tmpl}
    if min_count is not None:
        out["minCount"] = min_count
    return out


def workload(*pod_sets: dict[str, Any], name: str = "train",
             namespace: str = "default") -> dict[str, Any]:
    return {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "Workload",
            "metadata": {"name": name, "namespace": namespace},
            "spec": {"queueName": "q", "podSets": list(pod_sets)}}


def shape(name: str, *, price: str | int = 10, gpus: int = 8, roots: int = 2,
          nics: list[str] | None = None, rack: bool = True, per_domain: int = 8,
          max_nodes: int | None = None, cpu: str = "64") -> dict[str, Any]:
    nic_roots = nics if nics is not None else [f"pci{i}" for i in range(roots)]
    slices = [{"driver": b.GPU, "pool": {"name": "gpu", "resourceSliceCount": 1},
               "devices": gpu_devices(gpus, roots)}]
    if nic_roots:
        slices.append({"driver": b.NIC, "pool": {"name": "nic", "resourceSliceCount": 1},
                       "devices": nic_devices(nic_roots)})
    spec: dict[str, Any] = {"nodeLabels": {"node.example.com/shape": name},
                            "allocatable": {"cpu": cpu, "memory": "512Gi", "pods": "110"},
                            "resourceSlices": slices, "price": price}
    if rack:
        spec["topology"] = {"domainLabel": RACK, "nodesPerDomain": per_domain}
    if max_nodes is not None:
        spec["maxNodes"] = max_nodes
    return {"apiVersion": "fitgate.io/v1alpha1", "kind": "NodeShape",
            "metadata": {"name": name}, "spec": spec}


def allocated(name: str, node_name: str, devices: list[tuple[str, str]]) -> dict[str, Any]:
    """An allocated claim holding devices (driver, device) of `node_name`'s pools."""
    pools = {b.GPU: f"{node_name}-gpu", b.NIC: f"{node_name}-nic"}
    return b.allocated(name, *[(drv, pools[drv], dev) for drv, dev in devices])


def classes() -> list[dict[str, Any]]:
    return [b.gpu_class(), b.nic_class()]
