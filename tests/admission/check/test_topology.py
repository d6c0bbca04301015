"""The check on gangs Kueue's topology-aware scheduling placed (admission.check.topology):
reading `topologyAssignment`, the decision (fits there / elsewhere only / needs nodes
inside the domain / cannot), and steering Kueue's next reservation through the Job."""

from __future__ import annotations

import copy
import json
from collections.abc import Iterator
from typing import Any

import pytest

import fitcore
from admission import constants as c
from admission.app import diagnose as explain
from admission.check import topology
from admission.kube import kinds
from tests.admission import world as w
from tests.gang import builders as gb

RACK = gb.RACK
HOST = "kubernetes.io/hostname"


@pytest.fixture
def world() -> Iterator[w.World]:
    out = w.World()
    yield out
    out.inventory.inner.close()


def universal(*values: str, pods: int, levels: tuple[str, ...] = (RACK,)) -> dict[str, Any]:
    return {"levels": list(levels), "slices": [{
        "domainCount": 1, "valuesPerLevel": [{"universal": v} for v in values],
        "podCounts": {"universal": pods}}]}


def hosts(rack: str, pods: int = 2) -> dict[str, Any]:
    """A node-level assignment (the Topology's lowest level is the hostname), as Kueue
    v0.19.2 writes it (seen in e2e): the hostname level only, one pod on each of `rack`'s
    nodes `<rack>-0`, `<rack>-1`, ..."""
    return {"levels": [HOST], "slices": [{
        "domainCount": pods,
        "valuesPerLevel": [{"individual": {"prefix": f"{rack}-",
                                           "roots": [str(i) for i in range(pods)]}}],
        "podCounts": {"universal": 1}}]}


def rack_gang(pods: int = 2) -> dict[str, Any]:
    """Pods of 8 GPUs on one PCIe root, the pod set required in one rack."""
    return gb.pod_set("main", pods, templates=("eight",), topology=RACK)


def placed(rack: str | None, pods: int = 2, ta: dict[str, Any] | None = None,
           **kw: Any) -> dict[str, Any]:
    """A Workload owned by Job `train`, reserved with Kueue's TAS assignment on `rack`."""
    wl = w.admitted(rack_gang(pods), **kw)
    wl["metadata"]["ownerReferences"] = [{"apiVersion": "batch/v1", "kind": "Job",
                                          "name": "train", "uid": "job-uid",
                                          "controller": True}]
    if "admission" in wl["status"]:
        assignment = wl["status"]["admission"]["podSetAssignments"][0]
        if ta is not None:
            assignment["topologyAssignment"] = ta
        elif rack is not None:
            assignment["topologyAssignment"] = universal(rack, pods=pods)
    return wl


def job(suspended: bool = True, started: bool = False,
        annotations: dict[str, str] | None = None) -> dict[str, Any]:
    out: dict[str, Any] = {
        "apiVersion": "batch/v1", "kind": "Job",
        "metadata": {"name": "train", "namespace": "default", "uid": "job-uid",
                     "annotations": dict(annotations or {})},
        "spec": {"suspend": suspended, "template": {"spec": {
            "nodeSelector": {"team": "a"}, "containers": [{"name": "main"}]}}},
        "status": {"startTime": "2026-01-01T00:00:00Z"} if started else {}}
    return out


def racks(split: str = "rack-a", whole: str = "rack-b") -> list[dict[str, Any]]:
    """Two nodes per rack: `split`'s GPUs are 4 + 4 over two PCIe roots, `whole`'s 8 on
    one root."""
    return [*w.node(f"{split}-0", roots=2, rack=split), *w.node(f"{split}-1", roots=2, rack=split),
            *w.node(f"{whole}-0", roots=1, rack=whole), *w.node(f"{whole}-1", roots=1, rack=whole)]


def seed(world: w.World, *objs: dict[str, Any]) -> None:
    world.seed(*w.base(), gb.template("eight", gpus=8, nic=False), *objs)


# ------------------------------------------------------------------ reading


def test_reads_universal_and_individual_values_and_counts() -> None:
    ta = {"levels": [RACK, HOST], "slices": [
        {"domainCount": 1, "valuesPerLevel": [{"universal": "rack-a"}, {"universal": "n1"}],
         "podCounts": {"universal": 3}},
        {"domainCount": 2, "valuesPerLevel": [
            {"universal": "rack-b"},
            {"individual": {"prefix": "node-", "suffix": "-x", "roots": ["1", "2"]}}],
         "podCounts": {"individual": [1, 2]}}]}
    got = topology.assignment(placed(None, 6, ta))
    assert got == {"main": (
        fitcore.Domain({RACK: "rack-a", HOST: "n1"}, 3),
        fitcore.Domain({RACK: "rack-b", HOST: "node-1-x"}, 1),
        fitcore.Domain({RACK: "rack-b", HOST: "node-2-x"}, 2))}


def test_no_assignment_is_no_domains() -> None:
    assert topology.assignment(placed(None)) == {}
    assert topology.assignment(placed("rack-a", reserved=False)) == {}


BAD: dict[str, tuple[dict[str, Any], str]] = {
    "no-levels": ({"levels": [], "slices": []}, ".levels"),
    "values-per-level": ({"levels": [RACK], "slices": [{"domainCount": 1, "valuesPerLevel": [],
                                                         "podCounts": {"universal": 2}}]},
                         ".slices[0].valuesPerLevel"),
    "both": ({"levels": [RACK], "slices": [{"domainCount": 1, "valuesPerLevel": [
        {"universal": "a", "individual": {"roots": ["a"]}}], "podCounts": {"universal": 2}}]},
        ".slices[0].valuesPerLevel[0]"),
    "roots-length": ({"levels": [RACK], "slices": [{"domainCount": 2, "valuesPerLevel": [
        {"individual": {"roots": ["a"]}}], "podCounts": {"universal": 1}}]},
        ".slices[0].valuesPerLevel[0]"),
    "counts-length": ({"levels": [RACK], "slices": [{"domainCount": 2, "valuesPerLevel": [
        {"individual": {"roots": ["a", "b"]}}], "podCounts": {"individual": [2]}}]},
        ".slices[0].podCounts"),
    "domain-count": ({"levels": [RACK], "slices": [{"domainCount": 0, "valuesPerLevel": [
        {"universal": "a"}], "podCounts": {"universal": 2}}]}, ".slices[0].domainCount"),
}


@pytest.mark.parametrize("case", sorted(BAD), ids=sorted(BAD))
def test_bad_assignment_names_workload_and_field(case: str) -> None:
    ta, field = BAD[case]
    with pytest.raises(fitcore.InputError) as exc:
        topology.assignment(placed(None, ta=ta))
    [err] = exc.value.errors
    assert err.obj == "Workload default/train"
    assert err.path == "status.admission.podSetAssignments[0].topologyAssignment" + field


def test_counts_that_do_not_add_up_are_refused(world: w.World) -> None:
    seed(world, *racks(), placed(None, 2, universal("rack-a", pods=3)))
    with pytest.raises(fitcore.InputError, match="assigns 3 pods, but the pod set has 2"):
        world.reconciler().gang_of(world.workload())


# ------------------------------------------------------------------ the decision


async def test_fits_in_the_assigned_rack_is_ready_with_kueues_pin(world: w.World) -> None:
    seed(world, *racks(split="rack-b", whole="rack-a"), placed("rack-a"))
    await world.reconcile()
    e = world.entry()
    assert e["state"] == "Ready", e
    assert e["message"].startswith("fits in the topology domain Kueue assigned "
                                   "(main: topology.example.com/rack=rack-a (2 pods))")
    assert e["podSetUpdates"] == [{"name": "main", "nodeSelector": {RACK: "rack-a"}}]
    uid = world.workload()["metadata"]["uid"]
    cm = world.api.find(kinds.CONFIG_MAP, c.PLACEMENTS_PREFIX + uid, "default")
    assert cm is not None
    stored = json.loads(cm["data"][c.PLACEMENTS_KEY])
    # The Workload's own pod set and indices, on the assigned rack.
    assert sorted((p["podSet"], p["index"]) for p in stored) == [("main", 0),
                                                                ("main", 1)]
    assert {p["node"] for p in stored} <= {"rack-a-0", "rack-a-1"}


async def test_fits_elsewhere_only_is_retry_without_a_request_and_marks_the_job(
        world: w.World) -> None:
    # Kueue chose rack-a (by CPU); its GPUs are split over two roots, so a pod of 8 GPUs
    # on one root fits no node there. rack-b holds the gang. Without the TAS check,
    # fitgate said Ready (placing the gang on rack-b, where Kueue's ungater never puts it).
    seed(world, job(), *racks(), placed(None, ta=hosts("rack-a")))
    await world.reconcile()
    e = world.entry()
    assert e["state"] == "Retry", e
    assert "does not fit in the topology domain Kueue assigned (main: " \
           "kubernetes.io/hostname=rack-a-0 (1 pods), kubernetes.io/hostname=rack-a-1 " \
           "(1 pods))" in e["message"]
    assert "fits existing nodes elsewhere (topology.example.com/rack=rack-b, 2 pods on 2 " \
           "nodes (rack-b-0, rack-b-1)); fitgate asks Kueue to reserve again there" \
           in e["message"]
    assert e["requeueAfterSeconds"] == c.TOPOLOGY_STEER_RETRY_SECONDS
    assert world.requests() == []
    # The domain to steer to, on the Workload; its pod sets change only once Kueue has
    # released the quota (see steering below). The job carries the disagreement only.
    wl = world.workload()
    assert json.loads(wl["metadata"]["annotations"][c.TOPOLOGY_DOMAIN_ANNOTATION]) == {
        "main": {RACK: "rack-b"}}
    assert "nodeSelector" not in wl["spec"]["podSets"][0]["template"]["spec"]
    marked = world.api.find(kinds.JOB, "train", "default")
    assert marked is not None
    record = json.loads(marked["metadata"]["annotations"][c.TOPOLOGY_DISAGREEMENT_ANNOTATION])
    assert record["steeredTo"] == {"main": {RACK: "rack-b"}}
    assert marked["spec"]["template"]["spec"]["nodeSelector"] == {"team": "a"}


async def test_without_a_node_level_kueue_cannot_be_steered(world: w.World) -> None:
    # A Topology whose lowest level is the rack: Kueue's TAS ignores the pod set's
    # nodeSelector then, so fitgate says Retry with its usual backoff and marks nothing.
    seed(world, job(), *racks(), placed("rack-a"))
    await world.reconcile()
    e = world.entry()
    assert e["state"] == "Retry", e
    assert "fitgate cannot steer it: Kueue honours a pod set's nodeSelector only in a " \
           "Topology whose lowest level is kubernetes.io/hostname" in e["message"]
    assert e["requeueAfterSeconds"] == c.BACKOFF_BASE_SECONDS
    assert c.TOPOLOGY_DOMAIN_ANNOTATION not in (world.workload()["metadata"].get(
        "annotations") or {})
    assert world.requests() == []


async def test_needs_nodes_inside_the_assigned_rack_asks_for_a_shape_that_lands_there(
        world: w.World) -> None:
    # Nothing fits existing nodes (all GPUs split); the shape "in-a" adds nodes with
    # 8 GPUs on one root labelled rack-a, "fresh" adds them in new racks.
    in_a = w.shape("in-a", roots=1)
    in_a["spec"]["nodeLabels"][RACK] = "rack-a"
    fresh = gb.shape("fresh", roots=1, price=1)
    seed(world, *racks(split="rack-a", whole="rack-x")[:6], in_a, fresh, placed("rack-a"))
    await world.reconcile()
    assert world.entry()["state"] == "Pending"
    [pr] = world.requests()
    plan = json.loads(pr["metadata"]["annotations"][c.PLAN_ANNOTATION])
    assert {s["shape"] for s in plan["shapes"]} == {"in-a"}


async def test_no_shape_lands_in_the_assigned_rack_is_retry_saying_why(world: w.World) -> None:
    fresh = gb.shape("fresh", roots=1)
    seed(world, *racks(split="rack-a", whole="rack-x")[:6], fresh, placed("rack-a"))
    await world.reconcile()
    e = world.entry()
    assert e["state"] == "Retry", e
    assert world.requests() == []
    assert ("NodeShape fresh puts new nodes in fresh topology.example.com/rack domains, "
            "which cannot help a gang Kueue pinned to an existing one") in e["message"]


async def test_no_new_node_can_join_an_assignment_of_single_nodes(world: w.World) -> None:
    in_a = w.shape("in-a", roots=1)
    in_a["spec"]["nodeLabels"][RACK] = "rack-a"
    seed(world, *racks(split="rack-a", whole="rack-x")[:6], in_a,
         placed(None, ta=hosts("rack-a")))
    await world.reconcile()
    e = world.entry()
    assert e["state"] == "Retry", e
    assert world.requests() == []
    assert "Kueue assigned single existing nodes, which new nodes cannot join" in e["message"]


def test_exact_pod_counts_per_domain() -> None:
    """Kueue's assignment to single hosts is held to exactly: 2 pods on a node with room
    for 1 do not fit, though the gang fits both nodes."""
    objs = [*w.node("n1", rack="r", roots=1, cpu="8"), *w.node("n2", rack="r", roots=1)]
    snapshot_nodes = list(objs)
    g = fitcore.gang_of(placed("r"), [gb.template("eight", gpus=8, nic=False)])
    one_each = fitcore.within_domains(g, {"main": (
        fitcore.Domain({RACK: "r", HOST: "n1"}, 1), fitcore.Domain({RACK: "r", HOST: "n2"}, 1))})
    both_on_n1 = fitcore.within_domains(g, {"main": (
        fitcore.Domain({RACK: "r", HOST: "n1"}, 2),)})
    inv = fitcore.Inventory()
    for obj in [*snapshot_nodes, *gb.classes()]:
        inv.apply("ADDED", obj)
    assert inv.fit(g).verdict == "fits"
    fits = inv.fit(one_each.gang)
    assert fits.verdict == "fits"
    merged = one_each.merge(fits.placements)
    assert sorted((p.pod_set, p.index, p.node) for p in merged) == [
        ("main", 0, "n1"), ("main", 1, "n2")]
    assert inv.fit(both_on_n1.gang).verdict != "fits"


STALE = {
    "rack-level": (universal("rack-a", pods=2), "main: topology.example.com/rack=rack-a "
                   "(2 pods)", "pod set main is assigned topology.example.com/rack=rack-a"),
    "node-level": (hosts("rack-a"), "main: kubernetes.io/hostname=rack-a-0 (1 pods), "
                   "kubernetes.io/hostname=rack-a-1 (1 pods)",
                   "pod set main is assigned node rack-a-0"),
}


@pytest.mark.parametrize("case", sorted(STALE), ids=sorted(STALE))
async def test_an_assignment_from_before_the_steer_is_reserved_again_at_once(
        world: w.World, case: str) -> None:
    # Kueue re-reserved from its queue's copy taken before fitgate steered the pod set
    # (seen in e2e: within a second of the eviction): the assignment names rack-a, the
    # pod set now selects rack-b. Not a broken Workload: reserve again, soon.
    ta, assigned, why = STALE[case]
    wl = placed(None, ta=ta)
    wl["spec"]["podSets"][0]["template"]["spec"]["nodeSelector"] = {RACK: "rack-b"}
    seed(world, job(), *racks(), wl)
    await world.reconcile()
    e = world.entry()
    assert e["state"] == "Retry", e
    assert e["message"].startswith(
        f"coordination: Kueue assigned {assigned} from an earlier version of the pod set "
        f"({why}, but its nodeSelector now says topology.example.com/rack=rack-b"), e
    assert e["requeueAfterSeconds"] == c.TOPOLOGY_STEER_RETRY_SECONDS
    assert world.requests() == []


# ------------------------------------------------------------------ steering


def evicted(wl: dict[str, Any]) -> dict[str, Any]:
    wl = copy.deepcopy(wl)
    wl["status"].pop("admission", None)
    wl["status"]["conditions"] = [
        {"type": "QuotaReserved", "status": "False", "reason": "Pending", "message": "",
         "lastTransitionTime": "2026-01-01T00:01:00Z"},
        {"type": "Evicted", "status": "True", "reason": "AdmissionCheck", "message": "",
         "lastTransitionTime": "2026-01-01T00:01:00Z"}]
    return wl


MARK = {c.TOPOLOGY_DOMAIN_ANNOTATION: json.dumps({"main": {RACK: "rack-b"}})}


def marked(wl: dict[str, Any], selector: dict[str, str] | None = None) -> dict[str, Any]:
    wl = copy.deepcopy(wl)
    wl["metadata"]["annotations"] = dict(MARK)
    if selector is not None:
        wl["spec"]["podSets"][0]["template"]["spec"]["nodeSelector"] = dict(selector)
    return wl


@pytest.mark.parametrize("selector", [None, {"team": "a"}], ids=["no-selector", "selector"])
async def test_steers_the_workloads_pod_set_once_quota_is_released(
        world: w.World, selector: dict[str, str] | None) -> None:
    seed(world, *racks(), job(), marked(evicted(placed("rack-a")), selector))
    await world.reconcile()
    spec = world.workload()["spec"]["podSets"][0]["template"]["spec"]
    assert spec["nodeSelector"] == {**(selector or {}), RACK: "rack-b"}
    # The job is not touched (Kueue would not carry its nodeSelector over anyway).
    got = world.api.find(kinds.JOB, "train", "default")
    assert got is not None and got["spec"]["template"]["spec"]["nodeSelector"] == {"team": "a"}


@pytest.mark.parametrize("case", ["reserved", "unmarked", "already-selected",
                                  "evicted-otherwise"])
async def test_does_not_steer(world: w.World, case: str) -> None:
    wl = placed("rack-a") if case == "reserved" else evicted(placed("rack-a"))
    if case != "unmarked":
        wl = marked(wl, {RACK: "rack-a"} if case == "already-selected" else None)
    if case == "evicted-otherwise":
        wl["status"]["conditions"][1]["reason"] = "Preempted"
    before = copy.deepcopy(wl["spec"])
    seed(world, *racks(), job(), wl)
    await world.reconcile()
    if case == "reserved":  # decided again (Retry), pod sets unchanged
        assert world.entry()["state"] == "Retry"
    assert world.workload()["spec"] == before


# ------------------------------------------------------------------ explain


async def test_explain_says_which_domain_kueue_chose_and_why_fitgate_disagreed(
        world: w.World) -> None:

    seed(world, job(), *racks(), placed(None, ta=hosts("rack-a")))
    await world.reconcile()
    report = await explain.explain(world.api, "default", "train", None, fit=False)
    assert report.topology is not None
    assert report.topology["assigned"] == ("main: kubernetes.io/hostname=rack-a-0 (1 pods), "
                                           "kubernetes.io/hostname=rack-a-1 (1 pods)")
    record = report.topology["disagreement"]
    assert record["steeredTo"] == {"main": {RACK: "rack-b"}}
    assert "does not fit in the topology domain Kueue assigned" in record["message"]
    text = report.to_text()
    assert "topology: Kueue assigned main: kubernetes.io/hostname=rack-a-0 (1 pods)" in text
    assert "fitgate steered Kueue's next reservation to main: " \
           "topology.example.com/rack=rack-b" in text
    # After the eviction Kueue resets the check's message; the record on the Job stays.
    world.seed(evicted(world.workload()))
    after = await explain.explain(world.api, "default", "train", None, fit=False)
    assert after.topology is not None and after.topology["assigned"] is None
    assert after.topology["disagreement"] == record
    assert "topology: no domain assigned now" in after.to_text()


async def test_explain_without_tas_has_no_topology(world: w.World) -> None:

    seed(world, job(), *racks(), placed(None))
    report = await explain.explain(world.api, "default", "train", None, fit=False)
    assert report.topology is None
    assert "topology:" not in report.to_text()
