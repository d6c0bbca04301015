"""What the inventory makes as events come, for the first decision to find made: each
pool's allocation table (`Inventory._allocated`, from the tables made per claim when it
is applied, merged when a pool has several claims) and each node's node-local pools with
their slices (`Inventory._node_local`, remade when a pool's slices change).

After random sequences of events (claims taking devices exclusively, shared with consumed
capacity, with admin access; several claims in one pool; claims replaced and deleted;
slices published, moved to another node, deleted), both must be what a rebuild from every
object the inventory holds gives.
"""

from __future__ import annotations

import random
from typing import Any

import pytest

from fitcore import inventory, model
from tests.gang import realistic as rl

DRIVER = rl.GPU
SHARE = "2f0c2f1e-4b4e-4c0e-9d3c-{:012d}"


def _result(rng: random.Random, pool: str, device: int) -> dict[str, Any]:
    r: dict[str, Any] = {"request": "r", "driver": DRIVER, "pool": pool,
                         "device": f"gpu-{device}"}
    kind = rng.random()
    if kind < 0.25:
        r["shareID"] = SHARE.format(rng.randrange(1000))
        r["consumedCapacity"] = {"memory": rng.choice(["1Gi", "2Gi", "512Mi", "0"])}
    elif kind < 0.35:
        r["adminAccess"] = True
    return r


def _claim(name: str, results: list[dict[str, Any]]) -> dict[str, Any]:
    return {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
            "metadata": {"name": name, "namespace": "running"},
            "spec": {"devices": {"requests": [{"name": "r", "exactly": {
                "deviceClassName": "gpu"}}]}},
            "status": {"allocation": {"devices": {"results": results}}}}


def _slice(name: str, node: str, pool: str) -> dict[str, Any]:
    return {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceSlice",
            "metadata": {"name": name},
            "spec": {"driver": DRIVER, "nodeName": node,
                     "pool": {"name": pool, "generation": 1, "resourceSliceCount": 2},
                     "devices": [{"name": f"{name}-d{i}"} for i in range(2)]}}


def _tables_from_scratch(inv: inventory.Inventory) -> dict[tuple[str, str], list[Any]]:
    """Per pool, what every claim held takes there (the state from all results)."""
    by_pool: dict[tuple[str, str], list[model.AllocatedDevice]] = {}
    for results in inv._claims.values():
        for r in results:
            by_pool.setdefault((r.id.driver, r.id.pool), []).append(r)
    tables = {}
    for pk, results in by_pool.items():
        state = model.AllocatedState.from_results(results)
        taken: list[Any] = [("d", i.device) for i in state.dedicated]
        taken += [("s", i.device) for i in state.shared]
        taken += [("c", i.device, tuple(sorted(a.items())))
                  for i, a in state.consumed.items()]
        tables[pk] = sorted(taken)
    return tables


def _local_from_scratch(inv: inventory.Inventory) -> dict[str, list[Any]]:
    local: dict[str, list[Any]] = {}
    for pk, group in inv._pool_slices.items():
        owners = {s.node_name for s in group.values()}
        if len(owners) == 1 and None not in owners:
            local.setdefault(str(next(iter(owners))), []).append(
                (pk, sorted(s.name for s in group.values())))
    return {n: sorted(pools) for n, pools in local.items()}


@pytest.mark.parametrize("seed", range(6), ids=lambda s: f"seed={s}")
def test_tables_and_local_lists_are_a_rebuild(seed: int) -> None:
    rng = random.Random(seed)
    inv = inventory.Inventory()
    for o in rl.classes():
        inv.apply("ADDED", o)
    nodes = [f"node-{i}" for i in range(4)]
    pools = [f"pool-{i}" for i in range(5)]
    for step in range(120):
        what = rng.random()
        if what < 0.6:
            name = f"claim-{rng.randrange(12)}"
            if rng.random() < 0.2:
                inv.apply("DELETED", _claim(name, []))
            else:
                results = [_result(rng, rng.choice(pools), rng.randrange(6))
                           for _ in range(rng.randint(1, 4))]
                inv.apply("MODIFIED", _claim(name, results))
        else:
            name = f"slice-{rng.randrange(8)}"
            if rng.random() < 0.2:
                inv.apply("DELETED", _slice(name, "", ""), read=False)
            else:
                inv.apply("MODIFIED", _slice(name, rng.choice(nodes), rng.choice(pools)))
        if step % 10 == 9:
            inv._current()
            assert {pk: sorted(t) for pk, t in inv._allocated.items()} == \
                _tables_from_scratch(inv)
            got = {n: sorted((pk, sorted(s.name for s in group)) for pk, group in pools_)
                   for n, pools_ in inv._node_local.items()}
            assert got == _local_from_scratch(inv)


def test_a_pool_of_one_claim_uses_the_claims_table() -> None:
    """Made once when the claim is applied, not again by the decision; a new table
    (a new object) after the claim changes."""
    inv = inventory.Inventory()
    inv.apply("ADDED", _claim("one", [{"request": "r", "driver": DRIVER, "pool": "p",
                                       "device": "gpu-0"}]))
    inv._current()
    first = inv._allocated[(DRIVER, "p")]
    assert first == [("d", "gpu-0")]
    assert first is inv._pool_claims[(DRIVER, "p")][("running", "one")][1]
    inv.apply("MODIFIED", _claim("one", [{"request": "r", "driver": DRIVER, "pool": "p",
                                          "device": "gpu-1"}]))
    inv._current()
    assert inv._allocated[(DRIVER, "p")] == [("d", "gpu-1")]
    assert inv._allocated[(DRIVER, "p")] is not first
    inv.apply("DELETED", _claim("one", []))
    inv._current()
    assert (DRIVER, "p") not in inv._allocated
    assert (DRIVER, "p") not in inv._pool_claims
