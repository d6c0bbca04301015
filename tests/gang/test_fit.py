"""Gang placement on existing nodes: all or nothing, minCount, node selection, taints,
resources, shared claims, required topology."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from tests.fitcore import builders as b
from tests.gang import builders as gb


@dataclasses.dataclass
class Case:
    id: str
    objects: list[dict[str, Any]]
    verdict: str
    placed: int = 0
    nodes: set[str] | None = None  # nodes the placements use, when it matters
    reason: str = ""  # a substring of the reasons
    category: str | None = None


def two_nodes(**kw: Any) -> list[dict[str, Any]]:
    return [*gb.gpu_node("n1", **kw), *gb.gpu_node("n2", **kw)]


T = gb.template()
NOT_READY = {"key": "node.kubernetes.io/not-ready", "effect": "NoSchedule"}
CASES = [
    # --- all or nothing
    Case("four-pods-fit-two-nodes", [*two_nodes(), T,
                                     gb.workload(gb.pod_set(count=4, templates=("gpus",)))],
         "fits", 4, {"n1", "n2"}),
    Case("five-pods-fit-nowhere-none-placed", [*two_nodes(), T,
                                               gb.workload(gb.pod_set(count=5,
                                                                      templates=("gpus",)))],
         "unsatisfiable", 0, reason="needs 5 pods; the 2 nodes hold 4", category="capacity"),
    Case("second-pod-set-fails-whole-gang-fails",
         [*two_nodes(), T, gb.workload(gb.pod_set("a", 2, templates=("gpus",)),
                                       gb.pod_set("b", 3, templates=("gpus",)))],
         "unsatisfiable", 0, reason="pod set b", category="capacity"),
    Case("later-pod-set-crowded-out-is-capacity",
         [*gb.gpu_node("n1"), T, gb.workload(gb.pod_set("a", 2, templates=("gpus",)),
                                             gb.pod_set("b", 1, templates=("gpus",)))],
         "unsatisfiable", 0, reason="pod set b", category="capacity"),
    Case("launcher-first-would-crowd-out-workers",
         [*gb.gpu_node("n1"), gb.node("n2"), T,
          gb.workload(gb.pod_set("launcher", 2, cpu="30"),
                      gb.pod_set("workers", 2, cpu="30", templates=("gpus",)))],
         "fits", 4, {"n1", "n2"}),
    Case("two-pod-sets-share-nodes",
         [*two_nodes(), T, gb.workload(gb.pod_set("a", 2, templates=("gpus",)),
                                       gb.pod_set("b", 2, templates=("gpus",)))],
         "fits", 4, {"n1", "n2"}),
    # --- minCount
    Case("min-count-places-what-fits",
         [*two_nodes(), T, gb.workload(gb.pod_set(count=6, min_count=3, templates=("gpus",)))],
         "fits", 4),
    Case("min-count-not-reached",
         [*gb.gpu_node("n1"), T, gb.workload(gb.pod_set(count=6, min_count=3,
                                                        templates=("gpus",)))],
         "unsatisfiable", 0, reason="at least 3 of 6 pods"),
    # --- resources, selection, taints
    Case("cpu-limits-pods-per-node",
         [*two_nodes(cpu="16"), T, gb.workload(gb.pod_set(count=3, cpu="10",
                                                          templates=("gpus",)))],
         "unsatisfiable", 0, reason="then not enough cpu"),
    Case("bound-pods-use-cpu",
         [*two_nodes(cpu="16"), T,
          {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "namespace": "x"},
           "spec": {"nodeName": "n1", "containers": [{"name": "c", "resources": {
               "requests": {"cpu": "12"}}}]}, "status": {"phase": "Running"}},
          gb.workload(gb.pod_set(count=2, cpu="8", templates=("gpus",)))],
         "fits", 2, {"n2"}),
    Case("node-selector",
         [*gb.gpu_node("n1", zone="a"), *gb.gpu_node("n2", zone="b"), T,
          gb.workload(gb.pod_set(count=2, node_selector={"zone": "b"}, templates=("gpus",)))],
         "fits", 2, {"n2"}),
    Case("required-affinity",
         [*gb.gpu_node("n1", zone="a"), *gb.gpu_node("n2", zone="b"), T,
          gb.workload(gb.pod_set(count=2, templates=("gpus",), affinity=[
              {"key": "zone", "operator": "NotIn", "values": ["b"]}]))],
         "fits", 2, {"n1"}),
    Case("selector-matches-no-node",
         [*two_nodes(), T, gb.workload(gb.pod_set(count=1, node_selector={"zone": "c"},
                                                  templates=("gpus",)))],
         "unsatisfiable", 0, reason="2 nodes do not match", category="configuration"),
    Case("untolerated-taint",
         [*two_nodes(taints=[{"key": "gpu", "value": "yes", "effect": "NoSchedule"}]), T,
          gb.workload(gb.pod_set(count=1, templates=("gpus",)))],
         "unsatisfiable", 0, reason="gpu=yes:NoSchedule", category="configuration"),
    # A node that is not ready, starting or cordoned may host the pods later: waiting for
    # it is capacity, never "can never fit".
    Case("not-ready-node-is-capacity",
         [*gb.gpu_node("n1", taints=[NOT_READY]), T,
          gb.workload(gb.pod_set(count=1, templates=("gpus",)))],
         "unsatisfiable", 0, reason="1 node would host its pods but is not ready for them "
         "yet (not ready, starting, cordoned or under pressure), e.g. "
         "node.kubernetes.io/not-ready:NoSchedule (node n1)", category="capacity"),
    Case("cordoned-only-node-is-capacity",
         [{**gb.gpu_node("n1")[0], "spec": {"unschedulable": True}}, *gb.gpu_node("n1")[1:],
          T, gb.workload(gb.pod_set(count=1, templates=("gpus",)))],
         "unsatisfiable", 0, reason="node.kubernetes.io/unschedulable", category="capacity"),
    Case("not-ready-node-that-could-never-host-says-why",
         [*gb.gpu_node("n1", gpus=2, taints=[NOT_READY]), T,
          gb.workload(gb.pod_set(count=1, templates=("gpus",)))],
         "unsatisfiable", 0, reason="node n1: holds none of its pods", category="configuration"),
    Case("not-ready-and-untolerated-taint-is-configuration",
         [*gb.gpu_node("n1", taints=[NOT_READY, {"key": "gpu", "effect": "NoSchedule"}]), T,
          gb.workload(gb.pod_set(count=1, templates=("gpus",)))],
         "unsatisfiable", 0, reason="1 node has a taint", category="configuration"),
    Case("tolerated-taint",
         [*two_nodes(taints=[{"key": "gpu", "value": "yes", "effect": "NoSchedule"}]), T,
          gb.workload(gb.pod_set(count=4, templates=("gpus",), tolerations=[
              {"key": "gpu", "operator": "Exists"}]))],
         "fits", 4),
    Case("tainted-node-in-the-chosen-rack",
         [*gb.gpu_node("n1", rack="r1", taints=[{"key": "gpu", "effect": "NoSchedule"}]),
          *gb.gpu_node("n2", rack="r1"), T,
          gb.workload(gb.pod_set(count=2, templates=("gpus",), topology=gb.RACK))],
         "fits", 2, {"n2"}),
    Case("prefer-no-schedule-does-not-block",
         [*two_nodes(taints=[{"key": "gpu", "effect": "PreferNoSchedule"}]), T,
          gb.workload(gb.pod_set(count=1, templates=("gpus",)))],
         "fits", 1),
    # --- DRA: allocations carried forward, already allocated devices
    Case("nic-on-other-root-never-fits",
         [*gb.gpu_node("n1", nics=["pci9"]), T, gb.workload(gb.pod_set(count=1,
                                                                       templates=("gpus",)))],
         "unsatisfiable", 0, reason="matchAttribute", category="configuration"),
    Case("allocated-devices-are-not-reused",
         [*two_nodes(), T,
          gb.allocated("busy", "n1", [(b.GPU, "gpu-0"), (b.NIC, "nic-0")]),
          gb.workload(gb.pod_set(count=3, templates=("gpus",)))],
         "fits", 3),
    Case("allocated-devices-leave-too-little",
         [*two_nodes(), T,
          gb.allocated("busy", "n1", [(b.GPU, "gpu-0"), (b.NIC, "nic-0")]),
          gb.workload(gb.pod_set(count=4, templates=("gpus",)))],
         "unsatisfiable", 0, reason="holds 1 of its pods"),
]


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_fit(run_plan, case: Case) -> None:
    result = run_plan(case.objects)
    assert result.verdict == case.verdict, result
    placements = result.placements
    assert len(placements) == case.placed
    if case.nodes is not None:
        assert {p.node for p in placements} == case.nodes
    if case.reason:
        assert any(case.reason in r for r in result.reasons), result.reasons
    if case.category is not None:
        assert result.category == case.category


def shared_gpu_node(name: str) -> list[dict[str, Any]]:
    """One GPU that many claims may share, 40Gi of memory to hand out."""
    return [gb.node(name), b.rslice(f"{name}-gpu", [b.device(
        "gpu-0", capacity={"memory": {"value": "40Gi"}}, multi=True)], node=name,
        pool=f"{name}-gpu")]


def slice_template(memory: str) -> dict[str, Any]:
    spec = b.claim("slice", b.req("gpu", capacity={"memory": memory}))["spec"]
    return {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaimTemplate",
            "metadata": {"name": "slice", "namespace": "default"}, "spec": {"spec": spec}}


MORE_CASES = [
    Case("cpu-only-pods", [gb.node("n1", cpu="16"), gb.node("n2", cpu="16"),
                           gb.workload(gb.pod_set(count=4, cpu="6"))], "fits", 4),
    Case("cpu-only-pods-too-many", [gb.node("n1", cpu="16"), gb.node("n2", cpu="16"),
                                    gb.workload(gb.pod_set(count=5, cpu="6"))],
         "unsatisfiable", 0, reason="holds 2 of its pods, then not enough cpu"),
    Case("hostname-selector-asked-per-node",
         [*two_nodes(), T, gb.workload(gb.pod_set(count=2, templates=("gpus",), node_selector={
             "kubernetes.io/hostname": "n2"}))], "fits", 2, {"n2"}),
    Case("hostname-selector-too-small",
         [*two_nodes(), T, gb.workload(gb.pod_set(count=3, templates=("gpus",), node_selector={
             "kubernetes.io/hostname": "n2"}))], "unsatisfiable", 0,
         reason="1 node does not match"),
    Case("cordoned-node-skipped",
         [*gb.gpu_node("n1"), {**gb.gpu_node("n2")[0], "spec": {"unschedulable": True}},
          *gb.gpu_node("n2")[1:], T, gb.workload(gb.pod_set(count=2, templates=("gpus",)))],
         "fits", 2, {"n1"}),
    Case("shared-device-capacity-many-pods",
         [*shared_gpu_node("n1"), slice_template("10Gi"),
          gb.workload(gb.pod_set(count=4, cpu="1", templates=("slice",)))], "fits", 4, {"n1"}),
    Case("shared-device-capacity-runs-out",
         [*shared_gpu_node("n1"), slice_template("10Gi"),
          gb.workload(gb.pod_set(count=5, cpu="1", templates=("slice",)))],
         "unsatisfiable", 0, reason="holds 4 of its pods"),
]


@pytest.mark.parametrize("case", MORE_CASES, ids=[c.id for c in MORE_CASES])
def test_fit_more(run_plan, case: Case) -> None:
    test_fit(run_plan, case)


# ------------------------------------------------------------------ shared claims

SHARED = gb.shared_claim("dataset-cache", b.req("cache", "gpu", count=1))

SHARED_CASES = [
    Case("shared-claim-pods-on-one-node",
         [*two_nodes(), SHARED, gb.workload(gb.pod_set(count=5, cpu="1",
                                                       shared=("dataset-cache",)))],
         "fits", 5, {"n1"}),
    Case("shared-plus-own-claims",
         [*two_nodes(gpus=8), gb.template(gpus=2, nic=False), SHARED,
          gb.workload(gb.pod_set(count=3, cpu="1", templates=("gpus",),
                                 shared=("dataset-cache",)))],
         "fits", 3, {"n1"}),
    Case("shared-claim-pods-do-not-fit-one-node",
         [*two_nodes(gpus=8), gb.template(gpus=4, nic=False), SHARED,
          gb.workload(gb.pod_set(count=2, cpu="1", templates=("gpus",),
                                 shared=("dataset-cache",)))],
         "unsatisfiable", 0, reason="must run on one node"),
    Case("shared-claim-across-pod-sets",
         [*two_nodes(), SHARED,
          gb.workload(gb.pod_set("a", 2, cpu="1", shared=("dataset-cache",)),
                      gb.pod_set("b", 2, cpu="1", shared=("dataset-cache",)))],
         "fits", 4, {"n1"}),
    Case("already-allocated-shared-claim-pins-its-node",
         [*two_nodes(), {**SHARED, "status": {"allocation": {
             "devices": {"results": [{"request": "cache", "driver": b.GPU, "pool": "n2-gpu",
                                      "device": "gpu-0"}]},
             "nodeSelector": {"nodeSelectorTerms": [{"matchFields": [
                 {"key": "metadata.name", "operator": "In", "values": ["n2"]}]}]}}}},
          gb.workload(gb.pod_set(count=3, cpu="1", shared=("dataset-cache",)))],
         "fits", 3, {"n2"}),
]


@pytest.mark.parametrize("case", SHARED_CASES, ids=[c.id for c in SHARED_CASES])
def test_shared_claims(run_plan, case: Case) -> None:
    result = run_plan(case.objects)
    assert result.verdict == case.verdict, result
    assert len(result.placements) == case.placed
    if case.nodes is not None:
        assert {p.node for p in result.placements} == case.nodes
    if case.reason:
        assert any(case.reason in r for r in result.reasons), result.reasons
    if result.placements:
        # Allocated once: every pod sees the same devices for the shared claim.
        seen = {tuple(str(r.id) for r in res) for p in result.placements
                for name, res in p.devices if name == "dataset-cache"}
        assert len(seen) == 1, seen


# ------------------------------------------------------------------------ topology


def racks(used: dict[str, int]) -> list[dict[str, Any]]:
    """Racks r1 (4 nodes), r2 (3 nodes), r3 (2 nodes); `used[node]` pods' worth of GPUs
    already allocated on some nodes (one pod = 4 GPUs + the NIC of one root)."""
    out: list[dict[str, Any]] = []
    for rack, n in (("r1", 4), ("r2", 3), ("r3", 2)):
        for i in range(n):
            out += gb.gpu_node(f"{rack}-n{i}", rack=rack)
    for node, pods in used.items():
        devices = []
        for root in range(pods):
            devices += [(b.GPU, f"gpu-{root * 4 + k}") for k in range(4)]
            devices.append((b.NIC, f"nic-{root}"))
        out.append(gb.allocated(f"busy-{node}", node, devices))
    return out


@dataclasses.dataclass
class TopologyCase:
    id: str
    used: dict[str, int]
    count: int
    verdict: str
    domain: str | None = None
    min_count: int | None = None
    placed: int | None = None


TOPOLOGY_CASES = [
    TopologyCase("smallest-rack-that-fits", {}, 4, "fits", "r3"),
    TopologyCase("partly-used-small-rack-skipped", {"r3-n0": 1}, 4, "fits", "r2"),
    TopologyCase("partly-used-racks-best-fit", {"r1-n0": 2, "r2-n0": 1}, 5, "fits", "r2"),
    TopologyCase("only-largest-rack", {"r1-n0": 1}, 7, "fits", "r1"),
    TopologyCase("no-rack-large-enough", {"r1-n0": 2, "r1-n1": 1}, 7, "unsatisfiable"),
    TopologyCase("min-count-takes-largest-partial", {"r1-n0": 2, "r1-n1": 1}, 7, "fits", "r2",
                 min_count=5, placed=6),
]


@pytest.mark.parametrize("case", TOPOLOGY_CASES, ids=[c.id for c in TOPOLOGY_CASES])
def test_rack_topology(run_plan, case: TopologyCase) -> None:
    objects = [*racks(case.used), gb.template(),
               gb.workload(gb.pod_set(count=case.count, min_count=case.min_count,
                                      templates=("gpus",), topology=gb.RACK))]
    result = run_plan(objects)
    assert result.verdict == case.verdict, result.reasons
    if case.verdict == "fits":
        assert result.domains["workers"] == case.domain
        assert {p.node.split("-")[0] for p in result.placements} == {case.domain}
        assert len(result.placements) == (case.placed or case.count)
    else:
        assert any("in one domain of" in r for r in result.reasons)


def test_budget_runs_out_undecided(engine: str) -> None:
    from fitcore import gang
    from tests.gang.conftest import load

    bundle = load([*two_nodes(), T, gb.workload(gb.pod_set(count=4, templates=("gpus",)))])
    result = gang.fit(bundle.gangs[0], bundle.nodes, bundle.inventory, engine=engine,  # type: ignore[arg-type]
                      budget=1)
    assert result.verdict == "undecided"
    assert any("steps" in r for r in result.reasons), result.reasons


def test_missing_device_class_is_configuration(run_plan) -> None:
    template = gb.template()
    template["spec"]["spec"]["devices"]["requests"][0]["exactly"]["deviceClassName"] = "tpu"
    result = run_plan([*two_nodes(), template, gb.workload(gb.pod_set(templates=("gpus",)))])
    assert result.verdict == "unsatisfiable" and result.category == "configuration"
    assert any("DeviceClass 'tpu' does not exist" in r for r in result.reasons), result.reasons


@pytest.mark.parametrize(("assigned", "verdict", "placed"), [
    (None, "fits", 4), (3, "fits", 3), (5, "unsatisfiable", 0)],
    ids=["not-admitted-min-count", "admitted-3", "admitted-5"])
def test_admitted_count_replaces_count_and_min_count(run_plan, assigned: int | None,
                                                     verdict: str, placed: int) -> None:
    wl = gb.workload(gb.pod_set(count=6, min_count=2, templates=("gpus",)))
    if assigned is not None:
        wl["status"] = {"admission": {"clusterQueue": "cq", "podSetAssignments": [
            {"name": "workers", "count": assigned}]}}
    result = run_plan([*two_nodes(), T, wl])
    assert result.verdict == verdict
    assert len(result.placements) == placed


def test_tainted_node_seeing_a_cluster_pool_is_skipped(run_plan) -> None:
    fabric = b.rslice("fabric", [b.device(f"port-{i}") for i in range(4)], node=None,
                      driver=b.NIC, pool="fabric", allNodes=True)
    port = {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaimTemplate",
            "metadata": {"name": "port", "namespace": "default"},
            "spec": {"spec": b.claim("port", b.req("p", "nic"))["spec"]}}
    tainted = gb.node("n1", taints=[{"key": "gpu", "effect": "NoSchedule"}])
    result = run_plan([tainted, gb.node("n2"), fabric, port,
                       gb.workload(gb.pod_set(count=2, cpu="1", templates=("port",)))])
    assert result.verdict == "fits"
    assert {p.node for p in result.placements} == {"n2"}
