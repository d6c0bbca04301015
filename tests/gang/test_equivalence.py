"""Node classes change the cost, never the answer: `gang.place` against a naive
pod-by-pod, node-by-node simulation that calls the allocator on every node."""

from __future__ import annotations

import os
import random
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from fitcore import api, gang, model, workload
from tests.fitcore import builders as b
from tests.gang import builders as gb
from tests.gang.conftest import load


def naive(g: gang.Gang, bundle: Any, engine: str) -> list[tuple[str, int, str, list[str]]]:
    """First fit in node-name order, one pod at a time, allocations carried forward; pod
    sets in order, else the most demanding first, else in reverse (as `gang.place`)."""
    demanding = sorted(g.pod_sets, key=lambda ps: (-sum(
        r.exactly.count for c in ps.claims for r in c.claim.requests if r.exactly), -ps.count))
    rank = {ps.name: i for i, ps in enumerate(g.pod_sets)}
    for order in (list(g.pod_sets), demanding, list(reversed(g.pod_sets))):
        out = naive_in_order(order, bundle, engine)
        if out:
            return sorted(out, key=lambda p: (rank[p[0]], p[1]))
    return []


def place_one(node: model.Node, inventory: model.Inventory, free: dict[str, Any],
              requests: dict[str, Any], ps: gang.PodSet, engine: str
              ) -> tuple[model.Inventory, list[str]] | None:
    """One pod of `ps` on `node` if it fits there now: the inventory with its devices
    allocated and the devices it got; `free` is updated."""
    if any(free[node.name].get(k, 0) < v for k, v in requests.items()):
        return None
    fit = api.allocate(node, inventory, [c.claim for c in ps.claims],
                       engine=engine)  # type: ignore[arg-type]
    if not fit.fits:
        return None
    for k, v in requests.items():
        free[node.name][k] -= v
    results = [r for rs in fit.allocations for r in rs]
    inventory = model.Inventory(inventory.slices, inventory.classes,
                                inventory.allocated.plus([r.as_allocated() for r in results]))
    return inventory, sorted(str(r.id) for r in results)


def naive_in_order(pod_sets: list[gang.PodSet], bundle: Any, engine: str
                   ) -> list[tuple[str, int, str, list[str]]]:
    inventory = bundle.inventory
    free = {n.name: {k: q.value for k, q in n.allocatable.items()} for n in bundle.nodes}
    for name, used in bundle.used.items():
        for k, q in used.items():
            free[name][k] -= q.value
    out = []
    for ps in pod_sets:
        requests = {k: q.value for k, q in ps.requests.items()}
        requests["pods"] = requests.get("pods", 0) + 1
        for index in range(ps.count):
            for node in sorted(bundle.nodes, key=lambda n: n.name):
                placed = place_one(node, inventory, free, requests, ps, engine)
                if placed is None:
                    continue
                inventory, devices = placed
                out.append((ps.name, index, node.name, devices))
                break
            else:
                return []
    return out


def cluster(seed: int) -> list[dict[str, Any]]:
    rng = random.Random(seed)
    objects: list[dict[str, Any]] = []
    for i in range(rng.randint(4, 12)):
        name = f"n{i:02d}"
        gpus = rng.choice([4, 8, 8, 8, 16])
        roots = rng.choice([1, 2]) if gpus < 16 else 4
        objects += gb.gpu_node(name, gpus=gpus, roots=roots, cpu=rng.choice(["16", "64"]))
        busy = rng.sample(range(gpus), rng.choice([0, 0, 1, 4]))
        if busy:
            objects.append(gb.allocated(f"busy-{name}", name,
                                        [(b.GPU, f"gpu-{d}") for d in busy]))
    return objects


@pytest.mark.parametrize("seed", range(12), ids=lambda s: f"seed={s}")
def test_same_answer_as_naive_simulation(engine: str, seed: int) -> None:
    rng = random.Random(1000 + seed)
    sets = [gb.pod_set("a", rng.randint(1, 8), cpu="6", templates=("gpus",))]
    if rng.random() < 0.5:
        sets.append(gb.pod_set("b", rng.randint(1, 4), cpu="4", templates=("one",)))
    bundle = load([*cluster(seed), gb.template(gpus=rng.choice([2, 4])),
                   gb.template("one", gpus=1, nic=False), gb.workload(*sets)])
    g = bundle.gangs[0]
    expected = naive(g, bundle, engine)
    result = gang.fit(g, bundle.nodes, bundle.inventory, bundle.used,
                      engine=engine)  # type: ignore[arg-type]
    got = [(p.pod_set, p.index, p.node, sorted(str(r.id) for _, rs in p.devices for r in rs))
           for p in result.placements]
    assert result.fits == bool(expected), result.reasons
    assert got == expected


EXAMPLES = int(os.environ.get("FITGATE_GANG_EXAMPLES", "40"))


@pytest.mark.timeout(600)
@settings(max_examples=EXAMPLES, derandomize=True, database=None, deadline=None,
          suppress_health_check=list(HealthCheck))
@given(seed=st.integers(min_value=12, max_value=2**32 - 1))
def test_property_same_answer_as_naive_simulation(seed: int) -> None:
    """More clusters than the table above (FITGATE_GANG_EXAMPLES, default 40)."""
    engine = "c" if api.compiled_available() else "py"
    test_same_answer_as_naive_simulation(engine, seed)


def test_identical_nodes_cost_one(engine: str) -> None:
    objects: list[dict[str, Any]] = []
    for i in range(300):
        objects += gb.gpu_node(f"n{i:03d}", rack=f"r{i // 30}")
    objects.append(gb.allocated("busy", "n000", [(b.GPU, "gpu-0")]))
    bundle = load([*objects, gb.template(),
                   gb.workload(gb.pod_set(count=40, templates=("gpus",), topology=gb.RACK))])
    result = gang.fit(bundle.gangs[0], bundle.nodes, bundle.inventory,
                      engine=engine)  # type: ignore[arg-type]
    assert result.fits
    assert result.domains["workers"] == "r0"  # holds one pod less than the others: best fit
    # Two classes (the busy node, the rest): a few allocator calls, not 300.
    assert result.stats.allocations <= 4
    assert len({p.node for p in result.placements}) == 21  # n000 holds one pod, not two


@pytest.mark.parametrize("count", [3, 4, 5], ids=lambda c: f"pods={c}")
def test_pool_for_all_nodes_is_shared_by_the_gang(engine: str, count: int) -> None:
    """Devices of an allNodes slice are one pool for the whole cluster: what one pod takes
    there, no pod on another node can take (nodes seeing it are not grouped)."""
    fabric = b.rslice("fabric", [b.device(f"port-{i}") for i in range(4)], node=None,
                      driver=b.NIC, pool="fabric", allNodes=True)
    template = {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaimTemplate",
                "metadata": {"name": "port", "namespace": "default"},
                "spec": {"spec": b.claim("port", b.req("p", "nic"))["spec"]}}
    bundle = load([gb.node("n1", cpu="8"), gb.node("n2", cpu="8"), gb.node("n3", cpu="8"),
                   fabric, template, gb.workload(gb.pod_set(count=count, cpu="3",
                                                            templates=("port",)))])
    g = bundle.gangs[0]
    expected = naive(g, bundle, engine)
    result = gang.fit(g, bundle.nodes, bundle.inventory, engine=engine)  # type: ignore[arg-type]
    got = [(p.pod_set, p.index, p.node, sorted(str(r.id) for _, rs in p.devices for r in rs))
           for p in result.placements]
    assert result.fits == (count <= 4) == bool(expected)
    assert got == expected


def naive_capacity(ps: gang.PodSet, nodes: list[model.Node], bundle: Any, engine: str,
                   limit: int) -> list[tuple[str, list[str]]]:
    """First fit of up to `limit` pods of `ps` on `nodes` (name order), one at a time."""
    inventory = bundle.inventory
    free = {n.name: {k: q.value for k, q in n.allocatable.items()} for n in nodes}
    requests = {k: q.value for k, q in ps.requests.items()}
    requests["pods"] = requests.get("pods", 0) + 1
    out: list[tuple[str, list[str]]] = []
    for node in sorted(nodes, key=lambda n: n.name):
        while len(out) < limit:
            placed = place_one(node, inventory, free, requests, ps, engine)
            if placed is None:
                break
            inventory, devices = placed
            out.append((node.name, devices))
    return out


@pytest.mark.parametrize("seed", range(10), ids=lambda s: f"seed={s}")
def test_topology_same_answer_as_naive_best_fit(engine: str, seed: int) -> None:
    rng = random.Random(2000 + seed)
    objects: list[dict[str, Any]] = []
    for r in range(rng.randint(2, 5)):
        for i in range(rng.randint(1, 5)):
            name = f"r{r}-n{i}"
            gpus = rng.choice([8, 8, 16])
            objects += gb.gpu_node(name, gpus=gpus, roots=gpus // 4, rack=f"r{r}",
                                   cpu=rng.choice(["16", "64"]))
            busy = rng.sample(range(gpus), rng.choice([0, 0, 2, 4]))
            if busy:
                objects.append(gb.allocated(f"busy-{name}", name,
                                            [(b.GPU, f"gpu-{d}") for d in busy]))
    count = rng.randint(2, 12)
    min_count = rng.choice([None, max(1, count // 2)])
    bundle = load([*objects, gb.template(),
                   gb.workload(gb.pod_set(count=count, min_count=min_count, cpu="6",
                                          templates=("gpus",), topology=gb.RACK))])
    g = bundle.gangs[0]
    ps = g.pod_sets[0]
    racks: dict[str, list[model.Node]] = {}
    for n in bundle.nodes:
        racks.setdefault(n.labels[gb.RACK], []).append(n)
    capacity = {d: len(naive_capacity(ps, nodes, bundle, engine, 10_000))
                for d, nodes in racks.items()}
    full = sorted((c, d) for d, c in capacity.items() if c >= count)
    partial = sorted(((c, d) for d, c in capacity.items() if ps.needed <= c < count),
                     key=lambda x: (-x[0], x[1]))
    choice = (full or partial or [None])[0]
    result = gang.fit(g, bundle.nodes, bundle.inventory, engine=engine)  # type: ignore[arg-type]
    if choice is None:
        assert not result.fits, result
        return
    expected = naive_capacity(ps, racks[choice[1]], bundle, engine, min(choice[0], count))
    assert result.fits, result.reasons
    assert result.domains["workers"] == choice[1]
    got = [(p.node, sorted(str(r.id) for _, rs in p.devices for r in rs))
           for p in result.placements]
    assert got == expected


@pytest.mark.parametrize("seed", range(6), ids=lambda s: f"seed={s}")
def test_realistic_same_answer_as_naive_simulation(engine: str, seed: int) -> None:
    """The unprojected snapshot on realistic clusters (unique attributes, random devices
    and MIG partitions in use, bound pods): the same pods, nodes and devices as the naive
    simulation. (`Inventory.fit`, with projected classes, is checked in test_projection.)"""
    from tests.gang import realistic as rl

    rng = random.Random(3000 + seed)
    objects = rl.cluster(rng.randint(4, 12), seed, rack_size=4)
    template = rng.choice([rl.template(), rl.template("h100-root", nic=False, gpus=4),
                           rl.mig_template("h100-root")])
    bundle = workload.load([(o, None) for o in [*objects, template,
                                                rl.workload(rng.randint(1, 6), cpu="24")]])
    g = bundle.gangs[0]
    expected = naive(g, bundle, engine)
    result = gang.fit(g, bundle.nodes, bundle.inventory, bundle.used,
                      engine=engine)  # type: ignore[arg-type]
    got = [(p.pod_set, p.index, p.node, sorted(str(r.id) for _, rs in p.devices for r in rs))
           for p in result.placements]
    assert result.fits == bool(expected), result.reasons
    assert got == expected
