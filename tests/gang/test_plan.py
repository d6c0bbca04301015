"""Plans over NodeShapes, and verification of the nodes that came."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from fitcore import gang, plan
from fitcore import reasons as codes
from tests.gang import builders as gb
from tests.gang.conftest import load


@dataclasses.dataclass
class Case:
    id: str
    objects: list[dict[str, Any]]
    verdict: str
    plan: list[tuple[str, int]] | None = None  # (shape, count) of the chosen plan
    price: str | None = None
    alternatives: list[str] | None = None  # shapes of the alternatives, in rank order
    category: str | None = None
    reason: str = ""


def gang_of(count: int, **kw: Any) -> list[dict[str, Any]]:
    return [gb.template(), gb.workload(gb.pod_set(count=count, templates=("gpus",), **kw))]


CHEAP_NO_ROOT = gb.shape("cheap", price=8, nics=["pci9"])  # NIC shares no root with a GPU
RAIL = gb.shape("rail", price=12)  # a NIC on each GPU root: 2 pods per node
BIG = gb.shape("big", price=20, gpus=16, roots=4, cpu="128")  # 4 pods per node

CASES = [
    Case("fits-existing-no-plan", [*gb.gpu_node("n1"), RAIL, *gang_of(2)], "fits"),
    Case("pricier-shape-when-cheap-breaks-match-attribute",
         [*gb.gpu_node("n1"), CHEAP_NO_ROOT, RAIL, *gang_of(6)], "needs-capacity",
         [("rail", 2)], "24", [], reason="holds 2 of its pods"),
    Case("ranked-alternatives-by-price",
         [CHEAP_NO_ROOT, RAIL, BIG, *gang_of(8)], "needs-capacity", [("big", 2)], "40",
         ["rail"]),
    Case("ties-broken-by-fewer-nodes",
         [gb.shape("small", price=10), gb.shape("large", price=20, gpus=16, roots=4,
                                                cpu="128"), *gang_of(4)],
         "needs-capacity", [("large", 1)], "20", ["small"]),
    Case("free-capacity-used-first", [*gb.gpu_node("n1"), RAIL, *gang_of(5)],
         "needs-capacity", [("rail", 2)], "24"),
    Case("topology-new-nodes-in-one-fresh-rack",
         [*gb.gpu_node("n1", rack="r1"), RAIL, *gang_of(5, topology=gb.RACK)],
         "needs-capacity", [("rail", 3)], "36"),
    Case("topology-nodes-per-domain-too-small",
         [gb.shape("rail", per_domain=2), *gang_of(6, topology=gb.RACK)],
         "unsatisfiable", category="capacity",
         reason="new rail nodes come in topology.example.com/rack domains of at most 2 nodes"),
    Case("max-nodes-limit",
         [gb.shape("rail", max_nodes=2), *gang_of(6)], "unsatisfiable",
         category="capacity"),
    Case("max-nodes-counts-existing-nodes",
         [*gb.gpu_node("n1", **{"node.example.com/shape": "rail"}),
          gb.shape("rail", max_nodes=2), *gang_of(6)], "unsatisfiable", category="capacity",
         reason="shape rail"),
    Case("no-node-no-shape-configuration",
         [*gb.gpu_node("n1", nics=["pci9"]), CHEAP_NO_ROOT, *gang_of(1)], "unsatisfiable",
         category="configuration", reason="no node and no shape can host even one pod"),
    Case("no-shapes-capacity", [*gb.gpu_node("n1"), *gang_of(3)], "unsatisfiable",
         category="capacity"),
]


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_plan(run_plan, case: Case) -> None:
    result = run_plan(case.objects)
    assert result.verdict == case.verdict, result.reasons
    if case.plan is not None:
        assert result.plan is not None
        assert [(s.shape, s.count) for s in result.plan.shapes] == case.plan
        assert plan.price_str(result.plan.price) == case.price
        # Every pod is placed, on existing or planned nodes.
        pods = sum(ps["count"] for ps in case.objects[-1]["spec"]["podSets"])
        assert len(result.plan.placements) == pods
    if case.alternatives is not None:
        assert [a.shapes[0].shape for a in result.alternatives] == case.alternatives
        prices = [result.plan.price, *(a.price for a in result.alternatives)]  # type: ignore[union-attr]
        assert prices == sorted(prices)
    if case.category is not None:
        assert result.category == case.category
    if case.reason:
        assert any(case.reason in r for r in result.reasons), result.reasons


def test_rejected_shape_says_why(run_plan) -> None:
    result = run_plan([CHEAP_NO_ROOT, RAIL, *gang_of(2)])
    assert result.plan is not None and result.plan.shapes[0].shape == "rail"
    (name, why), = result.rejected
    assert name == "cheap" and "matchAttribute" in why


def test_topology_plan_places_all_in_the_fresh_domain(run_plan) -> None:
    result = run_plan([*gb.gpu_node("n1", rack="r1"), RAIL, *gang_of(5, topology=gb.RACK)])
    assert result.plan is not None
    (group,) = result.plan.shapes
    assert group.domain == "rail-new-domain-0"
    assert all(p.node.startswith("rail-new-") for p in result.plan.placements)


# -------------------------------------------------------------------------- verify


def provisioned(shape: dict[str, Any], names: list[str], rack: str = "new-rack",
                edit: Any = None) -> list[dict[str, Any]]:
    """Real nodes as the autoscaler and the driver would publish them for `shape`."""
    spec = shape["spec"]
    out: list[dict[str, Any]] = []
    for name in names:
        labels = {**spec["nodeLabels"], "kubernetes.io/hostname": name, gb.RACK: rack}
        out.append({"apiVersion": "v1", "kind": "Node",
                    "metadata": {"name": name, "labels": labels},
                    "status": {"allocatable": dict(spec["allocatable"])}})
        for s in spec["resourceSlices"]:
            body = {**s, "nodeName": name, "pool": {"name": f"{name}-{s['pool']['name']}",
                                                    "resourceSliceCount": 1}}
            obj = {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceSlice",
                   "metadata": {"name": f"{name}-{s['pool']['name']}"}, "spec": body}
            if edit is not None:
                obj = edit(name, obj)
            out.append(obj)
    return out


def wrong_nic_root(name: str, obj: dict[str, Any]) -> dict[str, Any]:
    """The driver on this node reports its second NIC on another PCIe root."""
    import copy

    obj = copy.deepcopy(obj)
    if name.endswith("-b") and obj["spec"]["driver"] == "nic.example.com":
        obj["spec"]["devices"][1]["attributes"][gb.PCIE_ROOT] = {"string": "pci7"}
    return obj


@dataclasses.dataclass
class VerifyCase:
    id: str
    nodes: list[str]
    edit: Any
    verdict: str
    mismatch: str = ""


VERIFY_CASES = [
    VerifyCase("nodes-keep-the-promise", ["gke-a", "gke-b"], None, "fits"),
    VerifyCase("nic-on-other-root", ["gke-a", "gke-b"], wrong_nic_root, "misfit",
               "node gke-b (shape rail): device nic.example.com/nic-1: attribute "
               "resource.kubernetes.io/pcieRoot is 'pci7', shape promised 'pci1'"),
    VerifyCase("a-node-missing", ["gke-a"], None, "misfit",
               "shape rail: planned 2 new nodes, found 1"),
]


@pytest.mark.parametrize("case", VERIFY_CASES, ids=[c.id for c in VERIFY_CASES])
def test_verify(engine: str, case: VerifyCase) -> None:
    before = [*gb.gpu_node("n1", rack="r1"), RAIL, *gang_of(4, topology=gb.RACK)]
    bundle = load(before)
    planned = plan.plan(bundle.gangs[0], gang.Snapshot(bundle.nodes, bundle.inventory),
                        bundle.shapes, engine=engine)  # type: ignore[arg-type]
    assert planned.plan is not None and planned.plan.nodes == 2
    after = load([*before, *provisioned(RAIL, case.nodes, edit=case.edit)])
    result = plan.verify(after.gangs[0], gang.Snapshot(after.nodes, after.inventory),
                         planned.plan, after.shapes, engine=engine)  # type: ignore[arg-type]
    assert result.verdict == case.verdict, (result.mismatches, result.reasons)
    if case.verdict == "fits":
        assert result.mismatches == ()
        assert {p.node for p in result.placements} == set(case.nodes)
    else:
        assert result.category == "coordination"
        assert case.mismatch in result.mismatches, result.mismatches


def cpu_shape(price: int = 1) -> dict[str, Any]:
    out = gb.shape("cpu", price=price, gpus=0, nics=[], rack=False)
    out["spec"]["nodeLabels"]["role"] = "launcher"
    out["spec"]["resourceSlices"] = []
    return out


def launcher_and_workers(workers: int) -> list[dict[str, Any]]:
    return [gb.template(), gb.workload(
        gb.pod_set("launcher", 1, cpu="2", node_selector={"role": "launcher"}),
        gb.pod_set("workers", workers, templates=("gpus",)))]


def test_mixed_plan_when_no_shape_hosts_every_pod_set(run_plan) -> None:
    result = run_plan([cpu_shape(), RAIL, *launcher_and_workers(4)])
    assert result.verdict == "needs-capacity", result.reasons
    assert result.plan is not None
    assert sorted((g.shape, g.count) for g in result.plan.shapes) == [("cpu", 1), ("rail", 2)]
    assert plan.price_str(result.plan.price) == "25"
    assert result.rejected == ()
    by_set = {p.pod_set: p.node for p in result.plan.placements}
    assert by_set["launcher"] == "cpu-new-0"


def test_mixed_plan_uses_free_capacity_first(run_plan) -> None:
    result = run_plan([*gb.gpu_node("n1"), cpu_shape(), RAIL, *launcher_and_workers(2)])
    assert result.plan is not None
    assert [(g.shape, g.count) for g in result.plan.shapes] == [("cpu", 1)]


def test_no_mixed_plan_when_a_pod_set_fits_no_shape(run_plan) -> None:
    result = run_plan([cpu_shape(), CHEAP_NO_ROOT, *launcher_and_workers(2)])
    assert result.verdict == "unsatisfiable"
    assert result.category == "configuration"


def test_shape_with_a_fixed_domain_joins_the_existing_rack(run_plan) -> None:
    fixed = gb.shape("rail-r1")
    fixed["spec"]["nodeLabels"][gb.RACK] = "r1"
    result = run_plan([*gb.gpu_node("n1", rack="r1"), fixed, *gang_of(4, topology=gb.RACK)])
    assert result.verdict == "needs-capacity", result.reasons
    assert result.plan is not None
    assert [(g.shape, g.count, g.domain) for g in result.plan.shapes] == [("rail-r1", 1, "r1")]
    assert {p.node for p in result.plan.placements} == {"n1", "rail-r1-new-0"}


@pytest.mark.parametrize(("shape", "category"), [
    (gb.shape("rail", max_nodes=0), "capacity"),
    (gb.shape("cheap", max_nodes=0, nics=["pci9"]), "configuration"),
], ids=["limit-reached-capacity", "limit-reached-and-unfit-configuration"])
def test_shape_at_its_limit(run_plan, shape: dict[str, Any], category: str) -> None:
    result = run_plan([shape, *gang_of(2)])
    assert result.verdict == "unsatisfiable"
    assert result.category == category
    assert result.rejected[0][1] == "at its limit of 0 nodes"


def test_mixed_plan_uses_a_shape_twice(run_plan) -> None:
    objects = [cpu_shape(), RAIL, gb.template(), gb.workload(
        gb.pod_set("w1", 2, templates=("gpus",)),
        gb.pod_set("launcher", 1, cpu="2", node_selector={"role": "launcher"}),
        gb.pod_set("w2", 2, templates=("gpus",)))]
    result = run_plan(objects)
    assert result.verdict == "needs-capacity", result.reasons
    assert result.plan is not None
    assert sorted((g.shape, g.count) for g in result.plan.shapes) == [
        ("cpu", 1), ("rail", 1), ("rail", 1)]
    nodes = {p.node for p in result.plan.placements}
    assert nodes == {"rail-new-0", "rail-new-1", "cpu-new-0"}


def test_identical_shapes_each_get_their_own_devices(run_plan) -> None:
    """Two shapes whose nodes look alike share node classes; the devices of a plan must
    still be those of its own new nodes."""
    twin = gb.shape("rail-b", price=10)
    result = run_plan([RAIL, twin, *gang_of(4)])
    assert result.plan is not None
    assert [(g.shape, g.count) for g in result.plan.shapes] == [("rail-b", 2)]
    assert [a.shapes[0].shape for a in result.alternatives] == ["rail"]
    for p in result.plan.placements:
        assert p.node.startswith("rail-b-new-")
        assert all(p.node in r.id.pool for _, rs in p.devices for r in rs)


# A shape without maxNodes used to be offered one new node per pod: 10^5 pods took 12 s
# and 361 MiB, 10^9 exhausted memory. Now what one node holds bounds the nodes made, and a
# gang no cluster could run is refused from that bound, before any node is made.
@pytest.mark.parametrize(("pods", "fewest"), [(100_000, 47_250), (10**9, 499_997_250)],
                         ids=["1e5-pods", "1e9-pods"])
def test_an_absurd_gang_is_refused_from_what_one_node_holds(run_plan, pods: int,
                                                             fewest: int) -> None:
    nodes = [o for i in range(50) for o in gb.gpu_node(f"n{i}")]  # 2 pods each
    result = run_plan([*nodes, gb.shape("rail", rack=False), *gang_of(pods)])
    assert result.verdict == "unsatisfiable", result.reasons
    (why,) = result.rejected_details
    assert why.code == codes.SHAPE_TOO_MANY_NODES
    assert why.shape == "rail"
    # 50 nodes of 110 pods could run 5,500 of them; one rail node holds 2.
    assert f"needs at least {fewest} new nodes (one node holds 2 of pod set workers)" \
        in why.message
    assert f"at most {plan.MAX_NEW_NODES} new nodes" in why.message


def test_a_large_gang_is_offered_only_the_nodes_that_can_matter(run_plan) -> None:
    """9,000 pods, 2 per new node, 100 on the existing nodes: 4,450 new nodes, found
    without making one node per pod."""
    nodes = [o for i in range(50) for o in gb.gpu_node(f"n{i}")]
    result = run_plan([*nodes, gb.shape("rail", rack=False), *gang_of(9_000)])
    assert result.verdict == "needs-capacity", result.reasons
    assert result.plan is not None
    assert [(s.shape, s.count) for s in result.plan.shapes] == [("rail", 4_450)]
