"""Small builders for DRA objects as Kubernetes JSON, so test cases read like manifests."""

from __future__ import annotations

from typing import Any

GPU = "gpu.example.com"
NIC = "nic.example.com"


def device(name: str, *, capacity: dict[str, Any] | None = None,
           counters: list[dict[str, Any]] | None = None, taints: list[dict[str, Any]] | None = None,
           multi: bool = False, **attributes: Any) -> dict[str, Any]:
    """A device; keyword attributes become typed attributes (`pcieRoot="pci0"`).

    Attribute names may use `__` for `/` and `_dot_` for `.` when a qualified name is needed.
    """
    attrs: dict[str, dict[str, Any]] = {}
    for key, value in attributes.items():
        key = key.replace("_dot_", ".").replace("__", "/")
        if isinstance(value, bool):
            attrs[key] = {"bool": value}
        elif isinstance(value, int):
            attrs[key] = {"int": value}
        elif isinstance(value, str) and value.startswith("v") and value[1:2].isdigit():
            attrs[key] = {"version": value[1:]}
        else:
            attrs[key] = {"string": value}
    out: dict[str, Any] = {"name": name, "attributes": attrs}
    if capacity:
        out["capacity"] = capacity
    if counters:
        out["consumesCounters"] = counters
    if taints:
        out["taints"] = taints
    if multi:
        out["allowMultipleAllocations"] = True
    return out


def gpus(n: int, *, roots: int = 1, prefix: str = "gpu", **extra: Any) -> list[dict[str, Any]]:
    """n GPUs spread round-robin... in blocks over `roots` PCIe roots."""
    per_root = max(1, n // roots)
    return [device(f"{prefix}-{i}", index=i, pcieRoot=f"pci{i // per_root}", **extra)
            for i in range(n)]


def rslice(name: str, devices: list[dict[str, Any]], *, node: str | None = "n1",
           driver: str = GPU, pool: str | None = None, generation: int = 0, count: int = 1,
           **spec: Any) -> dict[str, Any]:
    body: dict[str, Any] = {"driver": driver,
                            "pool": {"name": pool or node or name, "generation": generation,
                                     "resourceSliceCount": count},
                            "devices": devices, **spec}
    if node is not None and not any(k in spec for k in ("allNodes", "nodeSelector",
                                                       "perDeviceNodeSelection")):
        body["nodeName"] = node
    return {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceSlice",
            "metadata": {"name": name}, "spec": body}


def counter_slice(name: str, sets: dict[str, dict[str, str]], *, pool: str, driver: str = GPU,
                  node: str | None = "n1", count: int = 2, generation: int = 0
                  ) -> dict[str, Any]:
    body: dict[str, Any] = {
        "driver": driver, "pool": {"name": pool, "generation": generation,
                                   "resourceSliceCount": count},
        "sharedCounters": [{"name": s, "counters": {k: {"value": v} for k, v in c.items()}}
                           for s, c in sets.items()]}
    if node is not None:
        body["nodeName"] = node
    return {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceSlice",
            "metadata": {"name": name}, "spec": body}


def dclass(name: str, *expressions: str) -> dict[str, Any]:
    return {"apiVersion": "resource.k8s.io/v1", "kind": "DeviceClass", "metadata": {"name": name},
            "spec": {"selectors": [{"cel": {"expression": e}} for e in expressions]}}


def gpu_class() -> dict[str, Any]:
    return dclass("gpu", f"device.driver == '{GPU}'")


def nic_class() -> dict[str, Any]:
    return dclass("nic", f"device.driver == '{NIC}'")


def exact(cls: str = "gpu", count: int | None = 1, *, mode: str | None = None,
          selectors: tuple[str, ...] = (), tolerations: list[dict[str, Any]] | None = None,
          capacity: dict[str, str] | None = None, admin: bool = False) -> dict[str, Any]:
    out: dict[str, Any] = {"deviceClassName": cls}
    if mode:
        out["allocationMode"] = mode
    if count is not None and mode != "All":
        out["count"] = count
    if selectors:
        out["selectors"] = [{"cel": {"expression": e}} for e in selectors]
    if tolerations:
        out["tolerations"] = tolerations
    if capacity:
        out["capacity"] = {"requests": capacity}
    if admin:
        out["adminAccess"] = True
    return out


def req(name: str, cls: str = "gpu", count: int | None = 1, **kw: Any) -> dict[str, Any]:
    return {"name": name, "exactly": exact(cls, count, **kw)}


def first_available(name: str, *subs: tuple[str, dict[str, Any]]) -> dict[str, Any]:
    return {"name": name, "firstAvailable": [{"name": n, **body} for n, body in subs]}


def claim(name: str, *requests: dict[str, Any], match: str | None = None,
          match_requests: tuple[str, ...] = (), distinct: str | None = None,
          constraints: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    cons = list(constraints or [])
    if match:
        cons.append({"requests": list(match_requests), "matchAttribute": match})
    if distinct:
        cons.append({"distinctAttribute": distinct})
    spec: dict[str, Any] = {"devices": {"requests": list(requests)}}
    if cons:
        spec["devices"]["constraints"] = cons
    return {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
            "metadata": {"name": name, "namespace": "default"}, "spec": spec}


def allocated(name: str, *results: tuple[str, str, str], shares: dict[str, Any] | None = None,
              admin: bool = False) -> dict[str, Any]:
    """An allocated claim holding (driver, pool, device) results."""
    out = []
    for driver, pool, dev in results:
        r: dict[str, Any] = {"request": "r", "driver": driver, "pool": pool, "device": dev}
        if shares is not None:
            r["shareID"] = f"{name}-{dev}"
            r["consumedCapacity"] = shares
        if admin:
            r["adminAccess"] = True
        out.append(r)
    body = claim(name, req("r"))
    body["status"] = {"allocation": {"devices": {"results": out}}}
    return body


def node(name: str = "n1", **labels: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name, "labels": labels},
            "status": {"allocatable": {"cpu": "32", "memory": "256Gi", "pods": "110"}}}
