"""The kind tests' builders without a cluster (e2e/cluster/kind/objects.py).

The leader test in ``test_kind.py`` relies on fitgate planning one new node of a NodeShape
made from the worker (``objects.shape_of``) when the worker's GPUs are taken, and fitting
the gang on the worker once they are free. Here the same decision runs offline on a worker
publishing what the fake DRA driver publishes (four GPUs with two partitions each on
per-GPU counters, two NICs; ``e2e/cluster/local/modules/kind-dra-driver/main.go``).
"""

from __future__ import annotations

import json
import pathlib
from collections.abc import Iterator
from typing import Any

import pytest
import yaml

from admission.app import offline
from e2e.cluster.kind import objects, stack

HERE = pathlib.Path(__file__).resolve().parent
WORKER = "kind-worker"


def _attrs(**values: str | int) -> dict[str, Any]:
    names = {"pcie_root": objects.PCIE_ROOT}
    return {names.get(k, k): {"int": v} if isinstance(v, int) else {"string": v}
            for k, v in values.items()}


def _worker_slices() -> list[dict[str, Any]]:
    devices: list[dict[str, Any]] = []
    sets = []
    for g in range(4):
        root, counters = f"pci{g // 2}", f"gpu-{g}-slices"
        sets.append({"name": counters, "counters": {"slices": {"value": "7"}}})
        devices.append({"name": f"gpu-{g}", "attributes": _attrs(
            type="gpu", index=g, model="H100", pcie_root=root),
            "capacity": {"memory": {"value": "80Gi"}},
            "consumesCounters": [{"counterSet": counters, "counters": {"slices": {"value": "7"}}}]})
        devices += [{"name": f"gpu-{g}-3g-{k}", "attributes": _attrs(
            type="mig", profile="3g", parent=f"gpu-{g}", model="H100", pcie_root=root),
            "capacity": {"memory": {"value": "40Gi"}},
            "consumesCounters": [{"counterSet": counters, "counters": {"slices": {"value": "3"}}}]}
            for k in range(2)]
    devices += [{"name": f"nic-{n}", "attributes": _attrs(
        type="nic", index=n, model="CX7", pcie_root=f"pci{n}")} for n in range(2)]
    pool = {"name": WORKER, "generation": 1, "resourceSliceCount": 2}
    return [{"apiVersion": "resource.k8s.io/v1", "kind": "ResourceSlice",
             "metadata": {"name": f"{WORKER}-{i}"},
             "spec": {"driver": stack.DRIVER, "nodeName": WORKER, "pool": pool, **part}}
            for i, part in enumerate([{"devices": devices}, {"sharedCounters": sets}])]


def _node() -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Node",
            "metadata": {"name": WORKER, "labels": {"kubernetes.io/hostname": WORKER}},
            "status": {"allocatable": {"cpu": "8", "memory": "16Gi", "pods": "110",
                                       "ephemeral-storage": "100Gi"}}}


def _gpus_taken() -> dict[str, Any]:
    """Job first's claim: the worker's four GPUs."""
    return {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
            "metadata": {"name": "first-gpus", "namespace": "ns"},
            "spec": {"devices": {"requests": [{"name": "devices", "exactly": {
                "deviceClassName": stack.GPU_CLASS, "count": 4}}]}},
            "status": {"allocation": {
                "devices": {"results": [{"request": "devices", "driver": stack.DRIVER,
                                         "pool": WORKER, "device": f"gpu-{g}"}
                                        for g in range(4)]},
                "nodeSelector": {"nodeSelectorTerms": [{"matchFields": [{
                    "key": "metadata.name", "operator": "In", "values": [WORKER]}]}]}}}}


@pytest.mark.parametrize("busy", [False, True], ids=["gpus-free", "gpus-taken"])
def test_a_shape_like_the_worker_is_planned_only_while_its_gpus_are_taken(
        tmp_path: pathlib.Path, busy: bool) -> None:
    classes = [d for d in yaml.safe_load_all(
        (HERE.parent / "cluster" / "kind" / "dra-driver.yaml").read_text())
        if d and d["kind"] == "DeviceClass"]
    slices = _worker_slices()
    (tmp_path / "inventory.yaml").write_text(yaml.safe_dump_all(
        [_node(), *slices, *classes, *([_gpus_taken()] if busy else [])]))
    shape = objects.shape_of("like-worker", _node(), slices)
    (tmp_path / "shape.yaml").write_text(yaml.safe_dump(shape))
    (tmp_path / "job.yaml").write_text(yaml.safe_dump_all([
        objects.claim_template("four-gpus", "ns", stack.GPU_CLASS, 4),
        objects.job("second", "ns", "q", {"gpus": "four-gpus"}, "true")]))
    _, result = offline.run_fit([str(tmp_path / "inventory.yaml")],
                                [str(tmp_path / "shape.yaml")], str(tmp_path / "job.yaml"))
    if busy:
        assert result.verdict == "needs-capacity" and result.plan is not None, result.reasons
        assert [(s.shape, s.count) for s in result.plan.shapes] == [("like-worker", 1)]
    else:
        assert result.verdict == "fits", result.reasons
        assert {p.node for p in result.placements} == {WORKER}


def test_shape_of_a_node_without_the_drivers_slices_is_refused() -> None:
    with pytest.raises(RuntimeError, match=f"node {WORKER} publishes no ResourceSlices"):
        objects.shape_of("like-worker", _node(), [])


def test_json_stream_yields_each_pretty_printed_object_when_it_is_complete() -> None:
    docs = [{"kind": "Lease", "n": 1}, {"kind": "Lease", "n": [2, {"x": "}"}]}]
    first, second = (json.dumps(d, indent=4).splitlines(keepends=True) for d in docs)
    read: list[str] = []

    def lines() -> Iterator[str]:
        for line in [*first, *second]:
            read.append(line)
            yield line
    stream = objects.json_stream(lines())
    assert next(stream) == docs[0]
    assert len(read) == len(first), "the first object came before the second was read"
    assert list(stream) == docs[1:]
