"""Gang-level soundness: every gang placement fitcore makes, replayed pod by pod through
the upstream allocator, succeeds.

The oracle's gang mode pins each pod to the node fitcore chose, in fitcore's order,
allocates its claims with kube-scheduler's allocator and carries the allocation forward to
the next pod; every pod must get its devices. Gangs come from the gang fuzz scenarios
(`tests/gang/test_fuzz.scenario`): GPU nodes with PCIe roots and NICs, devices already in
use, GPUs shared by memory, a fabric pool every node reaches. When fitcore plans new nodes,
they are provisioned exactly as their shapes promise and the placements `verify` makes on
the real inventory are replayed instead.

Only DRA is replayed: the oracle knows nothing of CPU, taints or node selectors, which
tests/gang checks. Gangs with a shared ResourceClaim (one claim for several pods) are left
out, because the oracle's gang mode allocates every claim of every pod afresh.
It runs once per Kubernetes version the oracle is built for (FITGATE_ORACLE_KUBE_VERSIONS),
fitcore following the same version. FITGATE_SOUNDNESS_CASES sets the number of scenarios
(default 1,000; about 300 of them give a gang to replay).
"""

from __future__ import annotations

import json
import os
from typing import Any

import pytest

from bench.oracle import oracle as oracle_client
from fitcore import api, gang, plan, versions, workload
from tests.gang.test_fuzz import provision, scenario

CASES = int(os.environ.get("FITGATE_SOUNDNESS_CASES", "1000"))
ENGINE = "c" if api.compiled_available() else "py"


@pytest.fixture(scope="module", params=oracle_client.kube_versions())
def oracle(request):
    with oracle_client.Oracle.start(kube=request.param) as o:
        yield o


def replay(objects: list[dict[str, Any]], placements: tuple[gang.Placement, ...]
           ) -> dict[str, Any]:
    """The oracle case that replays `placements` on the cluster `objects` describe."""
    by_kind: dict[str, list[dict[str, Any]]] = {}
    for o in objects:
        by_kind.setdefault(o["kind"], []).append(o)
    templates = {o["metadata"]["name"]: o["spec"]["spec"]
                 for o in by_kind.get("ResourceClaimTemplate", [])}
    pods = []
    for p in placements:
        pod = f"{p.pod_set}-{p.index}"
        claims = [{"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
                   "metadata": {"name": f"{pod}-{name}", "namespace": "default"},
                   "spec": templates[name]} for name, _ in p.claims]
        if claims:
            pods.append({"name": pod, "node": p.node, "claims": claims})
    return {"mode": "gang", "nodes": by_kind["Node"], "slices": by_kind["ResourceSlice"],
            "classes": by_kind["DeviceClass"], "allocated": by_kind.get("ResourceClaim", []),
            "pods": pods}


def placements_of(seed: int, kube: str = "1.36"
                  ) -> tuple[list[dict[str, Any]], tuple[gang.Placement, ...]] | None:
    """fitcore's placements for the scenario of `seed` (on the nodes its plan provisions,
    if any), with the objects of that cluster; None when there is nothing to replay."""
    objects = scenario(seed)
    bundle = workload.load([(o, None) for o in objects])
    g = bundle.gangs[0]
    if any(pc.shared for ps in g.pod_sets for pc in ps.claims):
        return None
    version = versions.parse(kube)
    snapshot = gang.Snapshot(bundle.nodes, bundle.inventory, bundle.used, kube=version)
    result = plan.plan(g, snapshot, bundle.shapes, engine=ENGINE)
    if result.verdict == "fits":
        return objects, result.placements
    if result.verdict != "needs-capacity" or result.plan is None:
        return None
    objects += provision(objects, result.plan)
    after = workload.load([(o, None) for o in objects])
    verified = plan.verify(after.gangs[0], gang.Snapshot(after.nodes, after.inventory,
                                                         after.used, kube=version),
                           result.plan, after.shapes, engine=ENGINE)
    assert verified.verdict == "fits", (seed, verified.reasons)
    return objects, verified.placements


@pytest.mark.oracle
@pytest.mark.timeout(1800)
def test_every_fitcore_gang_placement_replays_through_the_upstream_allocator(oracle) -> None:
    seeds, cases = [], []
    for seed in range(CASES):
        found = placements_of(seed, oracle.kube)
        if found is not None and any(p.claims for p in found[1]):
            seeds.append(seed)
            cases.append(replay(*found))
    answers = oracle.ask_many(cases, timeout=600)
    failures = []
    for seed, case, answer in zip(seeds, cases, answers, strict=True):
        assert answer.get("error") is None, (seed, answer["error"])
        for pod, got in zip(case["pods"], answer["pods"], strict=True):
            if got["node"] != pod["node"] or got["error"] is not None:
                failures.append((seed, pod["name"], pod["node"], got))
                break
    pods = sum(len(c["pods"]) for c in cases)
    assert not failures, (
        f"{len(failures)} of {len(cases)} replayed gangs failed upstream; first: seed "
        f"{failures[0][0]}, pod {failures[0][1]} on {failures[0][2]}: "
        f"{json.dumps(failures[0][3])}")
    # Enough gangs, and pods with devices, were replayed for the test to mean something.
    assert len(cases) >= CASES // 10 and pods >= len(cases), (len(cases), pods)


REALISTIC_CASES = int(os.environ.get("FITGATE_SOUNDNESS_REALISTIC_CASES", "120"))


@pytest.mark.oracle
@pytest.mark.timeout(1800)
def test_inventory_placements_on_realistic_clusters_replay(oracle) -> None:
    """`Inventory.fit` on realistic clusters (projected node classes: unique uuids,
    random devices and MIG partitions in use), replayed pod by pod upstream, on the nodes
    fitcore chose: every pod gets its devices there."""
    import random

    from fitcore import inventory
    from tests.gang import realistic as rl

    cases, seeds = [], []
    for seed in range(REALISTIC_CASES):
        rng = random.Random(seed)
        objects = rl.cluster(rng.randint(4, 20), seed, rack_size=4)
        template = rng.choice([rl.template(), rl.template(nic=False, gpus=4),
                               rl.mig_template("h100-root", slices=rng.choice([1, 2]))])
        inv = inventory.Inventory(kube_version=oracle.kube)  # the oracle's allocator
        for o in objects:
            inv.apply("ADDED", o)
        g = workload.gang_of(rl.workload(rng.randint(1, 10), cpu="8"),
                             {("team", "h100-root"): template})
        result = inv.fit(g)
        if result.verdict != "fits":
            continue
        spec = template["spec"]["spec"]
        pods = [{"name": f"{p.pod_set}-{p.index}", "node": p.node, "claims": [
            {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
             "metadata": {"name": f"{p.pod_set}-{p.index}-{name}", "namespace": "team"},
             "spec": spec} for name, _ in p.claims]} for p in result.placements]
        by_kind: dict[str, list[dict[str, Any]]] = {}
        for o in objects:
            by_kind.setdefault(o["kind"], []).append(o)
        seeds.append(seed)
        cases.append({"mode": "gang", "nodes": by_kind["Node"],
                      "slices": by_kind["ResourceSlice"], "classes": by_kind["DeviceClass"],
                      "allocated": by_kind.get("ResourceClaim", []), "pods": pods})
    answers = oracle.ask_many(cases, timeout=600)
    failures = []
    for seed, case, answer in zip(seeds, cases, answers, strict=True):
        assert answer.get("error") is None, (seed, answer["error"])
        for pod, got in zip(case["pods"], answer["pods"], strict=True):
            if got["node"] != pod["node"] or got["error"] is not None:
                failures.append((seed, pod["name"], pod["node"], got))
                break
    assert not failures, (f"{len(failures)} of {len(cases)} replayed gangs failed upstream; "
                          f"first: {failures[0]}")
    assert len(cases) >= REALISTIC_CASES // 4, len(cases)
