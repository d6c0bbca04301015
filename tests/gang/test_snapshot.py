"""Rebuilding a snapshot after a change reuses what did not change, and answers alike."""

from __future__ import annotations

from typing import Any

import pytest

from fitcore import gang, kube, model
from tests.fitcore import builders as b
from tests.gang import builders as gb
from tests.gang.conftest import load

OBJECTS: list[dict[str, Any]] = [obj for i in range(6)
                                 for obj in gb.gpu_node(f"n{i}", rack=f"r{i // 3}")]
GANG = [gb.template(), gb.workload(gb.pod_set(count=5, templates=("gpus",),
                                              topology=gb.RACK))]


def placements(result: gang.GangResult) -> list[tuple[str, list[str]]]:
    return [(p.node, sorted(str(r.id) for _, rs in p.devices for r in rs))
            for p in result.placements]


@pytest.mark.parametrize("change", ["nothing", "allocation", "node", "slice", "bound-pod"])
def test_rebuild_reuses_unchanged_entries(engine: str, change: str) -> None:
    bundle = load([*OBJECTS, *GANG])
    before = gang.Snapshot(bundle.nodes, bundle.inventory, bundle.used)
    nodes, inventory, used = list(bundle.nodes), bundle.inventory, dict(bundle.used)
    if change == "allocation":
        results = kube.allocated_devices(gb.allocated("busy", "n0", [(b.GPU, "gpu-0")]))
        inventory = model.Inventory(inventory.slices, inventory.classes,
                                    inventory.allocated.plus(results))
    elif change == "node":
        nodes[0] = kube.node(gb.node("n0", rack="r0", cpu="8"))
    elif change == "slice":
        fresh = kube.resource_slice(gb.gpu_node("n0")[1])
        inventory = model.Inventory(tuple(fresh if s.name == "n0-gpu" else s
                                          for s in inventory.slices), inventory.classes,
                                    inventory.allocated)
    elif change == "bound-pod":
        used["n0"] = {"cpu": kube.node(gb.node("x", cpu="60")).allocatable["cpu"]}
    after = gang.Snapshot(nodes, inventory, used, previous=before)
    reused = [a is b_ for a, b_ in zip(before.entries, after.entries, strict=True)]
    assert reused[1:] == [True] * 5
    assert reused[0] == (change == "nothing")
    fresh_snapshot = gang.Snapshot(nodes, inventory, used)
    g = bundle.gangs[0]
    rebuilt = gang.place(g, after, engine=engine)  # type: ignore[arg-type]
    scratch = gang.place(g, fresh_snapshot, engine=engine)  # type: ignore[arg-type]
    assert rebuilt.verdict == scratch.verdict
    assert placements(rebuilt) == placements(scratch)
