"""Random but valid DRA cases, as Kubernetes JSON, for differential testing.

`case(seed)` is deterministic: a failing seed reproduces the case exactly. Cases cover
every feature the engine supports: several drivers and pools, generations and incomplete
pools, taints of each effect, shared counters (partitionable devices), multi-allocatable
devices with request policies, class and request selectors, ExactCount / All /
firstAvailable, matchAttribute (qualified and bare-name lookups) and distinctAttribute,
devices already allocated (dedicated and shared, with and without consumed capacity),
multi-node slices (a node selector, all nodes, per-device node selection, on this node
or not), and DRA extended resources: the claim the scheduler builds for a pod's
`resources.requests` of a class's `extendedResourceName` (via `fitcore.extended`).

Deliberately avoided, because upstream's answer there depends on search order or on a
known upstream bug rather than on the semantics (see docs/semantics.md):
selectors that fail at runtime on only some devices; distinctAttribute over a request
for more than one device; the same pool name under two drivers.
"""

from __future__ import annotations

import random
from typing import Any

from fitcore import extended, kube, model, values

GPU = "gpu.example.com"
NIC = "nic.example.com"
STD = "resource.kubernetes.io"
NODE = "n1"


def _device(rng: random.Random, driver: str, name: str, *, counter_sets: list[str],
            multi_ok: bool) -> dict[str, Any]:
    attrs: dict[str, Any] = {
        "index": {"int": rng.randrange(4)},
        "model": {"string": rng.choice(["a", "b"])},
        f"{STD}/pcieRoot": {"string": f"pci{rng.randrange(3)}"},
    }
    if rng.random() < 0.5:
        attrs["numa"] = {"int": rng.randrange(2)}
    if rng.random() < 0.3:
        attrs["driverVersion"] = {"version": rng.choice(["1.0.0", "1.2.0", "2.0.0-rc.1"])}
    if rng.random() < 0.3:
        attrs[f"{driver}/root"] = {"string": f"pci{rng.randrange(3)}"}
    dev: dict[str, Any] = {"name": name, "attributes": attrs}
    if rng.random() < 0.4:
        cap: dict[str, Any] = {"value": rng.choice(["8Gi", "16Gi", "40Gi"])}
        if rng.random() < 0.5:
            policy: dict[str, Any] = {"default": "2Gi"}
            if rng.random() < 0.5:
                policy["validRange"] = {"min": "2Gi", "step": rng.choice(["2Gi", "4Gi"])}
            else:
                policy["validValues"] = ["2Gi", "4Gi", "8Gi"]
            cap["requestPolicy"] = policy
        dev["capacity"] = {"memory": cap}
        if multi_ok and rng.random() < 0.5:
            dev["allowMultipleAllocations"] = True
    if rng.random() < 0.1:
        dev["taints"] = [{"key": rng.choice(["maint", "bad"]),
                          "value": rng.choice(["", "x"]),
                          "effect": rng.choice(["NoSchedule", "NoExecute", "None"])}]
    if counter_sets and rng.random() < 0.7:
        dev["consumesCounters"] = [{"counterSet": rng.choice(counter_sets), "counters": {
            "mem": {"value": str(rng.choice([1, 2, 4]))}}}]
    return dev


def _pool(rng: random.Random, driver: str, pool: str, slices_out: list[dict[str, Any]],
          devices_out: list[tuple[str, str, dict[str, Any]]]) -> None:
    generation = rng.choice([0, 1])
    n_slices = rng.choice([1, 1, 2])
    counter_sets: list[str] = []
    extra: list[dict[str, Any]] = []
    if rng.random() < 0.3:
        counter_sets = ["cs0", "cs1"][: rng.choice([1, 2])]
        extra.append({"sharedCounters": [
            {"name": cs, "counters": {"mem": {"value": str(rng.choice([2, 4, 6]))}}}
            for cs in counter_sets]})
    count = n_slices + len(extra)
    if rng.random() < 0.08:
        count += 1  # the pool is incomplete
    base = {"driver": driver, "pool": {"name": pool, "generation": generation,
                                       "resourceSliceCount": count}}
    k = 0
    for i in range(n_slices):
        devices = []
        for _ in range(rng.randrange(0, 7)):
            dev = _device(rng, driver, f"d{k}", counter_sets=counter_sets,
                          multi_ok=not counter_sets or rng.random() < 0.5)
            devices.append(dev)
            devices_out.append((driver, pool, dev))
            k += 1
        on_other = i == 1 and rng.random() < 0.3
        spec = dict(base, devices=devices, **_selection(rng, on_other, devices))
        slices_out.append({"apiVersion": "resource.k8s.io/v1", "kind": "ResourceSlice",
                           "metadata": {"name": f"{pool}-{i}"}, "spec": spec})
    for j, body in enumerate(extra):
        slices_out.append({"apiVersion": "resource.k8s.io/v1", "kind": "ResourceSlice",
                           "metadata": {"name": f"{pool}-counters-{j}"},
                           "spec": dict(base, nodeName=NODE, **body)})
    if rng.random() < 0.1:  # an older generation that must be ignored
        old = dict(base, pool={"name": pool, "generation": generation - 1,
                               "resourceSliceCount": 1}, nodeName=NODE,
                   # Every attribute a selector reads: with multi-node slices the
                   # stale generation can be the one a node sees.
                   devices=[{"name": "stale", "attributes": {"index": {"int": 0},
                                                             "model": {"string": "b"}}}])
        slices_out.append({"apiVersion": "resource.k8s.io/v1", "kind": "ResourceSlice",
                           "metadata": {"name": f"{pool}-old"}, "spec": old})


_RACK = {"nodeSelectorTerms": [{"matchExpressions": [
    {"key": "rack", "operator": "In", "values": ["r1"]}]}]}
_OTHER_RACK = {"nodeSelectorTerms": [{"matchExpressions": [
    {"key": "rack", "operator": "In", "values": ["r2"]}]}]}


def _selection(rng: random.Random, on_other: bool, devices: list[dict[str, Any]]
               ) -> dict[str, Any]:
    """How a slice selects nodes: mostly this node by name; sometimes several nodes (a
    rack selector, all nodes) or per device."""
    roll = rng.random()
    if on_other or roll < 0.75:
        return {"nodeName": "n2" if on_other else NODE}
    if roll < 0.85:
        return {"nodeSelector": _RACK if rng.random() < 0.8 else _OTHER_RACK}
    if roll < 0.92:
        return {"allNodes": True}
    for d in devices:
        d.update(rng.choice([{"nodeName": NODE}, {"nodeName": "n2"}, {"allNodes": True},
                             {"nodeSelector": _RACK}, {"nodeSelector": _OTHER_RACK}]))
    return {"perDeviceNodeSelection": True}


CLASSES = [
    {"apiVersion": "resource.k8s.io/v1", "kind": "DeviceClass", "metadata": {"name": "gpu"},
     "spec": {"selectors": [{"cel": {"expression": f"device.driver == '{GPU}'"}}]}},
    {"apiVersion": "resource.k8s.io/v1", "kind": "DeviceClass", "metadata": {"name": "nic"},
     "spec": {"selectors": [{"cel": {"expression": f"device.driver == '{NIC}'"}}]}},
    {"apiVersion": "resource.k8s.io/v1", "kind": "DeviceClass", "metadata": {"name": "any"},
     "spec": {}},
    {"apiVersion": "resource.k8s.io/v1", "kind": "DeviceClass", "metadata": {"name": "ext"},
     "spec": {"selectors": [{"cel": {"expression": f"device.driver == '{GPU}'"}}],
              "extendedResourceName": "example.com/gpu"}},
    {"apiVersion": "resource.k8s.io/v1", "kind": "DeviceClass", "metadata": {"name": "big"},
     "spec": {"selectors": [{"cel": {"expression": (
         f"has(device.capacity['{GPU}'].memory) && "
         f"device.capacity['{GPU}'].memory.compareTo(quantity('16Gi')) >= 0")}}]}},
]

SELECTORS = [
    "device.attributes[device.driver].model == 'a'",
    "device.attributes[device.driver].index >= 1",
    f"has(device.attributes['{GPU}'].driverVersion) && "
    f"device.attributes['{GPU}'].driverVersion.isGreaterThan(semver('1.1.0'))",
]


def _exact(rng: random.Random, *, one: bool, multi_names: bool) -> dict[str, Any]:
    body: dict[str, Any] = {"deviceClassName": rng.choice(["gpu", "gpu", "nic", "any", "big"])}
    if not one and rng.random() < 0.1:
        body["allocationMode"] = "All"
    else:
        body["count"] = 1 if one else rng.choice([1, 1, 1, 2, 3])
    if rng.random() < 0.25:
        body["selectors"] = [{"cel": {"expression": rng.choice(SELECTORS)}}]
    if rng.random() < 0.2:
        body["tolerations"] = [rng.choice([
            {"key": "maint", "operator": "Exists"}, {"operator": "Exists"},
            {"key": "bad", "value": "x", "effect": "NoSchedule"}])]
    if multi_names and rng.random() < 0.3:
        body["capacity"] = {"requests": {"memory": rng.choice(["1Gi", "3Gi", "5Gi"])}}
    return body


def _claim(rng: random.Random, name: str) -> dict[str, Any]:
    requests: list[dict[str, Any]] = []
    n = rng.choice([1, 1, 1, 2, 3])
    distinct = rng.random() < 0.15
    for i in range(n):
        if rng.random() < 0.25:
            subs = [{"name": f"s{j}", **_exact(rng, one=distinct, multi_names=True)}
                    for j in range(rng.choice([2, 3]))]
            requests.append({"name": f"r{i}", "firstAvailable": subs})
        else:
            requests.append({"name": f"r{i}", "exactly": _exact(rng, one=distinct,
                                                                multi_names=True)})
    constraints: list[dict[str, Any]] = []
    if distinct:
        constraints.append({"distinctAttribute": rng.choice([f"{STD}/pcieRoot",
                                                             f"{GPU}/index"])})
    elif rng.random() < 0.5:
        covered: list[str] = []
        if rng.random() < 0.4:
            r = rng.choice(requests)
            covered = [r["name"]]
            if "firstAvailable" in r and rng.random() < 0.5:
                covered = [f"{r['name']}/{r['firstAvailable'][0]['name']}"]
        constraints.append({"requests": covered, "matchAttribute": rng.choice(
            [f"{STD}/pcieRoot", f"{GPU}/model", f"{GPU}/numa", f"{NIC}/index", f"{GPU}/root"])})
    spec: dict[str, Any] = {"devices": {"requests": requests}}
    if constraints:
        spec["devices"]["constraints"] = constraints
    return {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
            "metadata": {"name": name, "namespace": "default"}, "spec": spec}


def case(seed: int) -> dict[str, Any]:
    """One random case in the oracle's `node` protocol (see bench/oracle/README.md)."""
    rng = random.Random(seed)
    slices: list[dict[str, Any]] = []
    devices: list[tuple[str, str, dict[str, Any]]] = []
    for driver, prefix in ((GPU, "g"), (NIC, "n")):
        for p in range(rng.choice([0, 1, 1, 2]) if driver == NIC else rng.choice([1, 1, 2])):
            _pool(rng, driver, f"{prefix}{p}", slices, devices)
    allocated = []
    for i, (driver, pool, dev) in enumerate(devices):
        if rng.random() < 0.15:
            result: dict[str, Any] = {"request": "r", "driver": driver, "pool": pool,
                                      "device": dev["name"]}
            if dev.get("allowMultipleAllocations"):
                result["shareID"] = f"share-{i}"
                if rng.random() < 0.7:
                    result["consumedCapacity"] = {"memory": "2Gi"}
            allocated.append({"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
                              "metadata": {"name": f"held-{i}", "namespace": "default"},
                              "spec": {"devices": {"requests": [{"name": "r", "exactly": {
                                  "deviceClassName": "any"}}]}},
                              "status": {"allocation": {"devices": {"results": [result]}}}})
    claims = [_claim(rng, f"c{i}") for i in range(rng.choice([1, 1, 2]))]
    if rng.random() < 0.2:  # a pod asking for devices as an extended resource
        claims.append(extended_claim(rng))
    node = {"apiVersion": "v1", "kind": "Node",
            "metadata": {"name": NODE, "labels": {"rack": "r1"}}}
    return {"id": str(seed), "mode": "node", "node": node, "slices": slices,
            "classes": CLASSES, "allocated": allocated, "claims": claims}


def extended_claim(rng: random.Random) -> dict[str, Any]:
    """The claim the scheduler allocates for a pod whose containers ask `example.com/gpu`
    (backed by the DeviceClass `ext`) or the class's implicit name, on a node that does
    not advertise them: built by `fitcore.extended`, as JSON."""
    names = ["example.com/gpu", f"{extended.IMPLICIT_PREFIX}gpu"]
    containers = []
    for i in range(rng.choice([1, 1, 2, 3])):
        init = i == 0 and rng.random() < 0.4
        requests = {n: values.Quantity.parse(rng.choice([1, 1, 2, 3]))
                    for n in names if rng.random() < 0.6} or {names[0]: values.Quantity.parse(1)}
        requests["cpu"] = values.Quantity.parse(1)
        containers.append(extended.Container(f"c{i}", init, init and rng.random() < 0.5,
                                             requests))
    classes = {c.name: c for c in (kube.device_class(o) for o in CLASSES)}
    wanted = extended.backed(containers, classes)
    _, claim = extended.for_node(containers, "default", "pod", {}, classes, wanted)
    assert claim is not None
    return {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
            "metadata": {"name": claim.name, "namespace": "default"},
            "spec": {"devices": {"requests": [_request_json(r) for r in claim.requests]}}}


def _request_json(r: model.DeviceRequest) -> dict[str, Any]:
    assert r.exactly is not None
    return {"name": r.name, "exactly": {"deviceClassName": r.exactly.device_class,
                                        "allocationMode": "ExactCount",
                                        "count": r.exactly.count}}
