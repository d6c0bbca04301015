"""Realistic clusters, generated from a seed, as Kubernetes JSON (for tests and benchmarks).

Unlike `builders.gpu_node`, every device publishes what real drivers publish: its own
`uuid` and `pciBusID`, a product name, an index, a driver version, its PCIe root; every
node has its own random devices in use and its own bound pods with random cpu/memory.

Racks of 40 nodes; the GPU model goes by rack (three models) and so does the NIC layout
(two layouts):
- `H100`: 16 GPUs on two PCIe roots; `rail` racks have a NIC on each root, `single`
  racks one NIC on pci0 only.
- `A100`: 8 GPUs on two roots, NICs as above.
- `A30`: 4 GPUs partitioned MIG-style: a pool with one counter set per GPU (4 memory
  slices), each GPU offered whole (takes 4) or as four 1g partitions (1 each); random
  partitions are in use.
Random allocations: of the H100/A100 nodes about 45% are free, 35% have 1-4 random
GPUs in use (sometimes a NIC), 20% one whole root with its NIC.
"""

from __future__ import annotations

import random
from typing import Any

GPU = "gpu.example.com"
NIC = "nic.example.com"
ROOT = "resource.kubernetes.io/pcieRoot"
RACK = "topology.example.com/rack"
PRODUCT = "nvidia.com/gpu.product"
RACK_SIZE = 40
MODELS = ("H100", "A100", "A30")


def _attrs(**kw: Any) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for k, v in kw.items():
        name = ROOT if k == "pcieRoot" else k
        if isinstance(v, bool):
            out[name] = {"bool": v}
        elif isinstance(v, int):
            out[name] = {"int": v}
        elif k == "driverVersion":
            out[name] = {"version": v}
        else:
            out[name] = {"string": v}
    return out


def _uuid(rng: random.Random) -> str:
    return "GPU-" + "".join(rng.choice("0123456789abcdef") for _ in range(32))


def _slice(name: str, node: str, driver: str, pool: str, devices: list[dict[str, Any]],
           count: int = 1, counters: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    spec: dict[str, Any] = {"driver": driver, "nodeName": node,
                            "pool": {"name": pool, "generation": 1, "resourceSliceCount": count}}
    if counters is not None:
        spec["sharedCounters"] = counters
    else:
        spec["devices"] = devices
    return {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceSlice",
            "metadata": {"name": name}, "spec": spec}


def _claim(name: str, results: list[tuple[str, str, str, str]]) -> dict[str, Any]:
    return {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
            "metadata": {"name": name, "namespace": "running"},
            "spec": {"devices": {"requests": [{"name": "r", "exactly": {
                "deviceClassName": "gpu"}}]}},
            "status": {"allocation": {"devices": {"results": [
                {"request": req, "driver": drv, "pool": pool, "device": dev}
                for req, drv, pool, dev in results]}}}}


def _pod(name: str, node: str, cpu: int, memory_gi: int) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": "running"},
            "spec": {"nodeName": node, "containers": [{"name": "main", "resources": {
                "requests": {"cpu": str(cpu), "memory": f"{memory_gi}Gi"}}}]},
            "status": {"phase": "Running"}}


def model_of(index: int, rack_size: int = RACK_SIZE) -> str:
    return MODELS[(index // rack_size) % len(MODELS)]


def node_objects(rng: random.Random, index: int, *, busy: float = 1.0,
                 rack_size: int = RACK_SIZE) -> list[dict[str, Any]]:
    """One node with its slices, allocated claims and bound pods. `busy` scales how
    likely a node has devices in use (0: nothing allocated, no pods)."""
    name = f"node-{index:05d}"
    rack = index // rack_size
    model = model_of(index, rack_size)
    rail = rack % 2 == 0
    labels = {"kubernetes.io/hostname": name, RACK: f"rack-{rack:03d}",
              "topology.kubernetes.io/zone": f"zone-{rack // 5}", PRODUCT: model,
              "node.kubernetes.io/instance-type": f"gpu-{model.lower()}"}
    cpu, memory = (128, 1024) if model == "H100" else (96, 512)
    out: list[dict[str, Any]] = [{
        "apiVersion": "v1", "kind": "Node", "metadata": {"name": name, "labels": labels},
        "status": {"allocatable": {"cpu": str(cpu), "memory": f"{memory}Gi", "pods": "110"}}}]
    bus = rng.randrange(16, 200)
    allocated: list[tuple[str, str, str, str]] = []
    if model in ("H100", "A100"):
        gpus, roots = (16, 2) if model == "H100" else (8, 2)
        per_root = gpus // roots
        devices = [{"name": f"gpu-{i}", "attributes": _attrs(
            uuid=_uuid(rng), pciBusID=f"0000:{bus + i:02x}:00.0", productName=model, index=i,
            driverVersion="550.54.15", pcieRoot=f"pci{i // per_root}"),
            "capacity": {"memory": {"value": "80Gi"}}} for i in range(gpus)]
        out.append(_slice(f"{name}-gpu", name, GPU, f"{name}-gpu", devices))
        nic_roots = [f"pci{r}" for r in range(roots)] if rail else ["pci0"]
        nics = [{"name": f"nic-{j}", "attributes": _attrs(
            macAddress=":".join(f"{rng.randrange(256):02x}" for _ in range(6)),
            linkSpeed="400G", pcieRoot=root)} for j, root in enumerate(nic_roots)]
        out.append(_slice(f"{name}-nic", name, NIC, f"{name}-nic", nics))
        draw = rng.random() / busy if busy > 0 else 1.0
        if draw < 0.20:
            root = rng.randrange(roots)
            allocated += [("r", GPU, f"{name}-gpu", f"gpu-{i}")
                          for i in range(root * per_root, (root + 1) * per_root)]
            if root < len(nic_roots):
                allocated.append(("r", NIC, f"{name}-nic", f"nic-{root}"))
        elif draw < 0.55:
            for i in rng.sample(range(gpus), rng.randint(1, 4)):
                allocated.append(("r", GPU, f"{name}-gpu", f"gpu-{i}"))
            if rng.random() < 0.3:
                allocated.append(("r", NIC, f"{name}-nic", f"nic-{rng.randrange(len(nics))}"))
    else:
        counters = [{"name": f"gpu-{g}-slices", "counters": {"memory": {"value": "4"}}}
                    for g in range(4)]
        devices = []
        for g in range(4):
            devices.append({"name": f"gpu-{g}", "attributes": _attrs(
                uuid=_uuid(rng), pciBusID=f"0000:{bus + g:02x}:00.0", productName=model,
                index=g, profile="4g", driverVersion="550.54.15", pcieRoot=f"pci{g // 2}"),
                "consumesCounters": [{"counterSet": f"gpu-{g}-slices",
                                      "counters": {"memory": {"value": "4"}}}]})
            for m in range(4):
                devices.append({"name": f"gpu-{g}-mig-{m}", "attributes": _attrs(
                    uuid="MIG-" + _uuid(rng)[4:], productName=model, index=g, profile="1g",
                    driverVersion="550.54.15", pcieRoot=f"pci{g // 2}"),
                    "consumesCounters": [{"counterSet": f"gpu-{g}-slices",
                                          "counters": {"memory": {"value": "1"}}}]})
        out.append(_slice(f"{name}-gpu-counters", name, GPU, f"{name}-gpu", [], 2, counters))
        out.append(_slice(f"{name}-gpu-devices", name, GPU, f"{name}-gpu", devices, 2))
        for g in range(4):
            draw = rng.random() / busy if busy > 0 else 1.0
            if draw < 0.2:
                allocated.append(("r", GPU, f"{name}-gpu", f"gpu-{g}"))
            elif draw < 0.6:
                for m in rng.sample(range(4), rng.randint(1, 3)):
                    allocated.append(("r", GPU, f"{name}-gpu", f"gpu-{g}-mig-{m}"))
    if allocated:
        out.append(_claim(f"busy-{name}", allocated))
    if busy > 0:
        for p in range(rng.randint(0, 3)):
            out.append(_pod(f"pod-{name}-{p}", name, rng.randint(1, 32), rng.randint(1, 128)))
    return out


def classes() -> list[dict[str, Any]]:
    def dc(name: str, driver: str) -> dict[str, Any]:
        return {"apiVersion": "resource.k8s.io/v1", "kind": "DeviceClass",
                "metadata": {"name": name},
                "spec": {"selectors": [{"cel": {"expression": f'device.driver == "{driver}"'}}]}}
    return [dc("gpu", GPU), dc("nic", NIC)]


def cluster(nodes: int, seed: int = 1, *, busy: float = 1.0,
            rack_size: int = RACK_SIZE) -> list[dict[str, Any]]:
    """Device classes and `nodes` nodes with their slices, claims and pods."""
    rng = random.Random(seed)
    out = classes()
    for i in range(nodes):
        out += node_objects(rng, i, busy=busy, rack_size=rack_size)
    return out


def template(name: str = "h100-root", *, model: str = "H100", gpus: int = 8,
             nic: bool = True) -> dict[str, Any]:
    """`gpus` GPUs of one model and (with `nic`) a NIC, all on one PCIe root."""
    requests: list[dict[str, Any]] = [{"name": "gpus", "exactly": {
        "deviceClassName": "gpu", "count": gpus, "selectors": [{"cel": {"expression":
            f'device.attributes["{GPU}"].productName == "{model}"'}}]}}]
    constraints = []
    if nic:
        requests.append({"name": "nic", "exactly": {"deviceClassName": "nic"}})
        constraints.append({"matchAttribute": ROOT})
    else:
        constraints.append({"requests": ["gpus"], "matchAttribute": ROOT})
    return {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaimTemplate",
            "metadata": {"name": name, "namespace": "team"},
            "spec": {"spec": {"devices": {"requests": requests, "constraints": constraints}}}}


def mig_template(name: str = "a30-slices", *, slices: int = 2) -> dict[str, Any]:
    """`slices` 1g partitions of one A30 GPU (distinct indexes would be other GPUs)."""
    return {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaimTemplate",
            "metadata": {"name": name, "namespace": "team"},
            "spec": {"spec": {"devices": {"requests": [{"name": "mig", "exactly": {
                "deviceClassName": "gpu", "count": slices, "selectors": [{"cel": {
                    "expression": f'device.attributes["{GPU}"].profile == "1g"'}}]}}],
                "constraints": [{"matchAttribute": f"{GPU}/index"}]}}}}


def workload(pods: int, *, template_name: str = "h100-root", topology: bool = False,
             cpu: str = "16", memory: str = "64Gi", name: str = "train") -> dict[str, Any]:
    tmpl: dict[str, Any] = {"spec": {
        "containers": [{"name": "main", "resources": {"requests": {"cpu": cpu,
                                                                   "memory": memory}}}],
        "resourceClaims": [{"name": "devices", "resourceClaimTemplateName": template_name}]}}
    if topology:
        tmpl["metadata"] = {"annotations": {"fitgate.io/required-topology": RACK}}
    return {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "Workload",
            "metadata": {"name": name, "namespace": "team"},
            "spec": {"queueName": "q", "podSets": [{"name": "workers", "count": pods,
                                                    "template": tmpl}]}}


def shapes() -> list[dict[str, Any]]:
    """Two H100 shapes: `h100-single` (one NIC, on pci0: one pod per node) and the
    dearer rail-aligned `h100-rail` (a NIC per root: two pods per node)."""
    out = []
    for name, price, nic_roots in (("h100-single", "9", ["pci0"]),
                                   ("h100-rail", "12", ["pci0", "pci1"])):
        gpus = [{"name": f"gpu-{i}", "attributes": _attrs(
            productName="H100", index=i, driverVersion="550.54.15", pcieRoot=f"pci{i // 8}"),
            "capacity": {"memory": {"value": "80Gi"}}} for i in range(16)]
        nics = [{"name": f"nic-{j}", "attributes": _attrs(linkSpeed="400G", pcieRoot=r)}
                for j, r in enumerate(nic_roots)]
        out.append({"apiVersion": "fitgate.io/v1alpha1", "kind": "NodeShape",
                    "metadata": {"name": name},
                    "spec": {"nodeLabels": {PRODUCT: "H100", "fitgate.io/shape": name},
                             "allocatable": {"cpu": "128", "memory": "1024Gi", "pods": "110"},
                             "resourceSlices": [
                                 {"driver": GPU, "pool": {"name": "gpu",
                                                          "resourceSliceCount": 1},
                                  "devices": gpus},
                                 {"driver": NIC, "pool": {"name": "nic",
                                                          "resourceSliceCount": 1},
                                  "devices": nics}],
                             "price": price,
                             "topology": {"domainLabel": RACK, "nodesPerDomain": RACK_SIZE}}})
    return out
