"""What the inventory reads of each node as events come (`Inventory._node_parts`: labels,
node-local pools and slices, free resources), so that a cold decision does not read every
node again: after random sequences of Node, ResourceSlice, Pod and ResourceClaim events,
each node's parts and its index entry must be what reading it afresh gives.
"""

from __future__ import annotations

import random
from typing import Any

import pytest

from fitcore import gangtypes, inventory, snapshot
from tests.gang import realistic as rl

DRIVER = rl.GPU


def _node(name: str, rng: random.Random) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name, "labels": {
        "kubernetes.io/hostname": name, rl.RACK: f"rack-{rng.randrange(2)}",
        **({"extra": "yes"} if rng.random() < 0.3 else {})}},
        "status": {"allocatable": {"cpu": str(rng.choice([8, 16])),
                                   "memory": f"{rng.choice([32, 64])}Gi", "pods": "110"}}}


def _slice(name: str, node: str, pool: str) -> dict[str, Any]:
    return {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceSlice",
            "metadata": {"name": name},
            "spec": {"driver": DRIVER, "nodeName": node,
                     "pool": {"name": pool, "generation": 1, "resourceSliceCount": 1},
                     "devices": [{"name": f"gpu-{i}"} for i in range(2)]}}


def _claim(name: str, pool: str | None) -> dict[str, Any]:
    claim: dict[str, Any] = {
        "apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
        "metadata": {"name": name, "namespace": "running"},
        "spec": {"devices": {"requests": [{"name": "r", "exactly": {
            "deviceClassName": "gpu"}}]}}}
    if pool is not None:
        claim["status"] = {"allocation": {"devices": {"results": [
            {"request": "r", "driver": DRIVER, "pool": pool, "device": "gpu-0"}]}}}
    return claim


def _check(inv: inventory.Inventory) -> None:
    snap = inv._current()
    for e in snap.entries:
        name = e.node.name
        node, local, parts = inv._node_parts[name]
        assert node is inv._nodes[name]
        assert local is inv._node_local.get(name, inventory._NO_POOLS)
        fresh = snapshot._node_parts(node, inv._used.get(name, {}), local, inv._allocated,
                                     gangtypes.HOSTNAME_LABEL)
        assert parts[:5] == fresh[:5], name
        assert (e.labels, e.local_slices, e.local_pools, e.free, e.pristine) == (
            fresh[0], fresh[2], fresh[3], fresh[4], fresh[5]), name
    assert set(inv._node_parts) == set(inv._nodes)


@pytest.mark.parametrize("seed", range(6), ids=lambda s: f"seed={s}")
def test_node_parts_are_read_afresh(seed: int) -> None:
    rng = random.Random(seed)
    inv = inventory.Inventory()
    for o in rl.classes():
        inv.apply("ADDED", o)
    nodes = [f"node-{i}" for i in range(4)]
    pools = [f"pool-{i}" for i in range(4)]
    for step in range(150):
        what = rng.random()
        if what < 0.2:
            name = rng.choice(nodes)
            if rng.random() < 0.2:
                inv.apply("DELETED", _node(name, rng))
            else:
                inv.apply("MODIFIED", _node(name, rng))
        elif what < 0.45:
            name = f"slice-{rng.randrange(6)}"
            if rng.random() < 0.2:
                inv.apply("DELETED", _slice(name, "", ""), read=False)
            else:
                inv.apply("MODIFIED", _slice(name, rng.choice(nodes), rng.choice(pools)))
        elif what < 0.8:
            name = f"pod-{rng.randrange(10)}"
            pod = rl._pod(name, rng.choice(nodes), rng.randint(1, 4), rng.randint(1, 8))
            inv.apply("DELETED" if rng.random() < 0.3 else "MODIFIED", pod)
        else:
            name = f"claim-{rng.randrange(4)}"
            inv.apply("MODIFIED", _claim(name, rng.choice([None, *pools])))
        if step % 7 == 6:
            _check(inv)
    _check(inv)
