"""Random gangs, clusters and shapes: whatever the verdict, the answer holds together.

- placements respect node selection, taints, free resources, devices (each device once),
  counts and minCount, and put a topology pod set in one domain;
- a plan's placements are valid on the existing nodes plus the planned ones;
- nodes provisioned exactly as the plan's shapes promise pass `verify` without mismatch.

FITGATE_FUZZ_EXAMPLES sets the number of cases (default 60).
"""

from __future__ import annotations

import os
import random
from fractions import Fraction
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from fitcore import api, gang, plan, predicates, reasons, workload
from tests.fitcore import builders as b
from tests.gang import builders as gb
from tests.gang.conftest import check_placements
from tests.gang.test_plan import provisioned

EXAMPLES = int(os.environ.get("FITGATE_FUZZ_EXAMPLES", "60"))
ENGINE = "c" if api.compiled_available() else "py"


def cpu_shape() -> dict[str, Any]:
    out = gb.shape("cpu", price=1, gpus=0, nics=[], rack=False)
    out["spec"]["resourceSlices"] = []
    return out


def scenario(seed: int) -> list[dict[str, Any]]:
    rng = random.Random(seed)
    objects: list[dict[str, Any]] = [*gb.classes()]
    for r in range(rng.randint(1, 4)):
        for i in range(rng.randint(1, 6)):
            name = f"r{r}-n{i}"
            gpus = rng.choice([0, 4, 8, 16])
            taints = ([{"key": "gpu", "effect": rng.choice(["NoSchedule", "NoExecute",
                                                             "PreferNoSchedule"])}]
                      if rng.random() < 0.2 else None)
            rack = f"r{r}" if rng.random() < 0.9 else None
            if rng.random() < 0.1:  # a pod already bound there
                objects.append({"apiVersion": "v1", "kind": "Pod",
                                "metadata": {"name": f"bound-{name}", "namespace": "x"},
                                "spec": {"nodeName": name, "containers": [{
                                    "name": "c", "resources": {"requests": {"cpu": "10"}}}]},
                                "status": {"phase": "Running"}})
            if rng.random() < 0.1:  # one GPU that many claims share by memory
                node = gb.node(name, rack=rack, cpu="32", taints=taints, zone="a")
                objects += [node, b.rslice(f"{name}-gpu", [b.device(
                    "gpu-0", capacity={"memory": {"value": "40Gi"}}, multi=True)],
                    node=name, pool=f"{name}-gpu")]
                continue
            if not gpus:
                node = gb.node(name, rack=rack, cpu="32", taints=taints, zone="a")
                if rng.random() < 0.2:
                    node["spec"] = {**node.get("spec", {}), "unschedulable": True}
                objects.append(node)
                continue
            objects += gb.gpu_node(name, gpus=gpus, roots=max(1, gpus // 4), rack=rack,
                                   cpu=rng.choice(["16", "64"]), taints=taints,
                                   zone=rng.choice(["a", "b"]))
            busy = rng.sample(range(gpus), rng.choice([0, 0, 1, 4]))
            if busy:
                objects.append(gb.allocated(f"busy-{name}", name,
                                            [(b.GPU, f"gpu-{d}") for d in busy]))
    objects += [gb.template("gpus", gpus=rng.choice([1, 2, 4])),
                gb.template("one", gpus=1, nic=False),
                gb.shared_claim("cache", b.req("c", "gpu", count=1))]
    templates: list[tuple[str, ...]] = [(), ("gpus",), ("one",), ("gpus", "one"), ("slice",)]
    objects.append({"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaimTemplate",
                    "metadata": {"name": "slice", "namespace": "default"},
                    "spec": {"spec": b.claim("slice", b.req("g", capacity={
                        "memory": rng.choice(["10Gi", "20Gi"])}))["spec"]}})
    if rng.random() < 0.3:  # ports of a fabric every node reaches (not node-local)
        objects.append(b.rslice("fabric", [b.device(f"port-{i}") for i in range(
            rng.randint(1, 6))], node=None, driver="fabric.example.com", pool="fabric",
            allNodes=True))
        objects.append(b.dclass("port", "device.driver == 'fabric.example.com'"))
        objects.append({"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaimTemplate",
                        "metadata": {"name": "port", "namespace": "default"},
                        "spec": {"spec": b.claim("port", b.req("p", "port"))["spec"]}})
        templates.append(("port",))
    sets = []
    for k in range(rng.randint(1, 3)):
        count = rng.randint(1, 8)
        sets.append(gb.pod_set(
            f"ps{k}", count, min_count=rng.choice([None, max(1, count // 2)]),
            cpu=rng.choice(["1", "6", "20"]),
            templates=rng.choice(templates),
            shared=("cache",) if rng.random() < 0.15 else (),
            topology=gb.RACK if rng.random() < 0.4 else None,
            node_selector=rng.choice([None, None, None, {"zone": "a"},
                                      {"kubernetes.io/hostname": "r0-n0"}]),
            tolerations=[{"key": "gpu", "operator": "Exists"}] if rng.random() < 0.3 else None))
    objects.append(gb.workload(*sets))
    if rng.random() < 0.7:
        objects.append(gb.shape("rail", price=12, per_domain=rng.choice([2, 8]),
                                max_nodes=rng.choice([None, 3, 10])))
    if rng.random() < 0.5:
        objects.append(gb.shape("cheap", price=8, nics=["pci9"]))
    if rng.random() < 0.3:
        objects.append(cpu_shape())
    if rng.random() < 0.2:  # new nodes join an existing rack
        fixed = gb.shape("rail-r0", price=13, max_nodes=rng.choice([None, 4]))
        fixed["spec"]["nodeLabels"][gb.RACK] = "r0"
        objects.append(fixed)
    return objects


def provision(objects: list[dict[str, Any]], p: plan.Plan) -> list[dict[str, Any]]:
    """The Nodes and ResourceSlices of the nodes plan `p` asks for, made exactly as their
    shapes (among `objects`) promise, under names of their own."""
    shapes = {s["metadata"]["name"]: s for s in objects if s["kind"] == "NodeShape"}
    new_objects: list[dict[str, Any]] = []
    for i, group in enumerate(p.shapes):
        names = [f"real-{group.shape}-{i}-{k}" for k in range(group.count)]
        batch = provisioned(shapes[group.shape], names, rack=group.domain or f"real-domain-{i}")
        if group.domain is None:  # no topology on the shape: no domain label either
            for obj in batch:
                if obj["kind"] == "Node":
                    obj["metadata"]["labels"].pop(gb.RACK, None)
        new_objects += batch
    return new_objects


def check(g: gang.Gang, snapshot: gang.Snapshot, used: dict[str, Any],
          placements: tuple[gang.Placement, ...]) -> None:
    shared = {pc.name for ps in g.pod_sets for pc in ps.claims if pc.shared}
    check_placements(placements, shared)
    nodes = {e.node.name: e.node for e in snapshot.entries}
    by_set = {ps.name: ps for ps in g.pod_sets}
    free = {name: {k: q.value for k, q in n.allocatable.items()} for name, n in nodes.items()}
    for name, requests in used.items():
        for k, q in requests.items():
            free[name][k] = free[name].get(k, Fraction(0)) - q.value
    domains: dict[str, set[str]] = {}
    placed: dict[str, int] = {}
    for p in placements:
        ps, node = by_set[p.pod_set], nodes[p.node]
        placed[ps.name] = placed.get(ps.name, 0) + 1
        assert all(node.labels.get(k) == v for k, v in ps.node_selector.items())
        assert ps.affinity is None or predicates.selector_matches(ps.affinity, node)
        assert not node.unschedulable
        for t in node.taints:
            if t.effect in ("NoSchedule", "NoExecute"):
                assert any(tol.tolerates(t) for tol in ps.tolerations), (p, t)
        for k, q in {**ps.requests}.items():
            free[p.node][k] = free[p.node].get(k, Fraction(0)) - q.value
        if "pods" in free[p.node]:
            free[p.node]["pods"] -= 1
        if ps.topology:
            domains.setdefault(ps.name, set()).add(node.labels[ps.topology])
    for name, amounts in free.items():
        assert all(v >= 0 for v in amounts.values()), (name, amounts)
    for ps in g.pod_sets:
        assert ps.needed <= placed.get(ps.name, 0) <= ps.count
        assert len(domains.get(ps.name, set())) <= 1


@pytest.mark.timeout(600)
@settings(max_examples=EXAMPLES, derandomize=True, database=None, deadline=None,
          suppress_health_check=list(HealthCheck))
@given(seed=st.integers(min_value=0, max_value=2**32 - 1))
def test_answers_hold_together(seed: int) -> None:
    objects = scenario(seed)
    bundle = workload.load([(o, None) for o in objects])
    g = bundle.gangs[0]
    snapshot = gang.Snapshot(bundle.nodes, bundle.inventory, bundle.used)
    result = plan.plan(g, snapshot, bundle.shapes, engine=ENGINE)
    # Every sentence has its structured reason, and codes know their category.
    assert [d.message for d in result.details] == list(result.reasons)
    assert [d.shape for d in result.rejected_details] == [n for n, _ in result.rejected]
    assert all(d.category == reasons.CATEGORY[d.code] for d in result.details)
    if result.verdict == "fits":
        check(g, snapshot, bundle.used, result.placements)
    if result.verdict != "needs-capacity":
        assert not result.placements or result.verdict == "fits"
        return
    assert result.plan is not None
    # Provision exactly what the plan asks for, under other names, and verify.
    after = workload.load([(o, None) for o in [*objects, *provision(objects, result.plan)]])
    after_snapshot = gang.Snapshot(after.nodes, after.inventory, after.used)
    verified = plan.verify(after.gangs[0], after_snapshot, result.plan, after.shapes,
                           engine=ENGINE)
    assert verified.mismatches == (), verified.mismatches
    assert verified.verdict == "fits", verified.reasons
    check(after.gangs[0], after_snapshot, after.used, verified.placements)
