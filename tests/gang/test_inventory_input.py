"""The Inventory carries what fitcore reads from real clusters (fitcore-input): the same
answers as the snapshot path (`workload.load` → `gang.Snapshot` → `plan.plan`) on the
real-world manifests, on both Kubernetes versions, with objects fed one event at a time
and in any order; and its projected node classes never merge nodes in a way that changes
an answer of pod (anti-)affinity, topology spread, DeviceTaintRules or extended
resources.
"""

from __future__ import annotations

import copy
import pathlib
import random
from collections.abc import Mapping, Sequence
from typing import Any

import pytest

from admission.app import offline
from fitcore import errors, gang, inventory, plan, projection, reasons, versions, workload
from tests.fitcore import builders as b
from tests.gang import builders as gb

HERE = pathlib.Path(__file__).parent / "manifests"
KUBE = ("1.36", "1.37")

# (id, inventory paths, workload path), as in test_manifests.
CASES = [
    ("anti-affinity-one-node-short", ["anti-affinity/inventory.yaml"],
     "anti-affinity/workload.yaml"),
    ("anti-affinity", ["anti-affinity/inventory.yaml", "anti-affinity/more.yaml"],
     "anti-affinity/workload.yaml"),
    ("extended-job", ["extended-job/inventory.yaml"], "extended-job/workload.yaml"),
    ("multihost", ["multihost/inventory.yaml"], "multihost/workload.yaml"),
    ("multihost-allocated", ["multihost/inventory.yaml"], "multihost-allocated/workload.yaml"),
    ("nvidia-mig", ["nvidia-mig/inventory.yaml"], "nvidia-mig/workload.yaml"),
    ("nvidia-mig-v1beta2", ["nvidia-mig/inventory.yaml"], "nvidia-mig/workload-v1beta2.yaml"),
    ("v1beta1-dump", ["v1beta1-dump/inventory.yaml"], "v1beta1-dump/workload.yaml"),
    ("taint-rules", ["extended-job/inventory.yaml", "taint-rules/rules.yaml"],
     "extended-job/workload.yaml"),
    ("taint-rule-without-selector", ["extended-job/inventory.yaml",
                                     "taint-rules/no-selector.yaml"],
     "extended-job/workload.yaml"),
    ("gpu-by-limits", ["mixed-dir/inventory"], "mixed-dir/gpu-limits.yaml"),
]


def _docs(paths: Sequence[str]) -> list[Any]:
    return offline.read_documents([str(HERE / p) for p in paths])


def snapshot_answer(inv_paths: Sequence[str], wl_path: str, kube: str) -> plan.PlanResult:
    """The fitcore-input path: load everything, one Snapshot, plan."""
    wl = _docs([wl_path])
    bundle = workload.load(_docs(inv_paths) + wl, kube_version=kube)
    sources = {s for _, s in wl}
    (g,) = [g for g in bundle.gangs if g.source in sources]
    snap = gang.Snapshot(bundle.nodes, bundle.inventory, bundle.used, pods=bundle.pods,
                         kube=versions.parse(kube))
    return plan.plan(g, snap, bundle.shapes)


def fed(objects: Sequence[Any], kube: str) -> inventory.Inventory:
    inv = inventory.Inventory(kube_version=kube)
    for obj in objects:
        inv.apply("ADDED", obj)  # raw objects: the Inventory reads them itself
    return inv


def inventory_objects(inv_paths: Sequence[str], wl_path: str) -> list[Any]:
    return [o for o, _ in _docs(inv_paths) + _docs([wl_path])
            if o.get("kind") in inventory.KINDS and o.get("apiVersion") != "apps/v1"]


def gang_from(inv_paths: Sequence[str], wl_path: str) -> gang.Gang:
    docs = [o for o, _ in _docs(inv_paths) + _docs([wl_path])]
    key = offline._key  # (namespace, name), defaulted namespace
    templates = {key(o): o for o in docs if o.get("kind") == "ResourceClaimTemplate"}
    claims = {key(o): o for o in docs if o.get("kind") == "ResourceClaim"}
    (obj,) = [o for o, _ in _docs([wl_path]) if o.get("kind") in ("Job", "Workload")]
    return workload.gang_of(obj, templates, claims)


def same(a: plan.PlanResult, b_: plan.PlanResult, *, text: bool = True) -> None:
    """Equal answers: verdict, category, placements (pod set, index, node, how many
    devices per claim), the reason codes, rejected shapes; with `text`, the reasons word
    for word too (projected classes group nodes that per-node classes list one by one,
    "node n0 (and 2 like it)", so on merged clusters only the codes are compared)."""
    assert (a.verdict, a.category) == (b_.verdict, b_.category), (a.reasons, b_.reasons)

    def where(r: plan.PlanResult) -> list[Any]:
        return [(p.pod_set, p.index, p.node, sorted((c, len(d)) for c, d in p.devices))
                for p in r.placements]

    assert where(a) == where(b_)
    assert [d.message for d in a.details] == list(a.reasons)
    if text:
        assert a.reasons == b_.reasons
        assert [d.code for d in a.details] == [d.code for d in b_.details]
    else:
        summary = {reasons.MORE_NODE_KINDS}  # said when the kinds of node listed run out
        assert {d.code for d in a.details} - summary == {d.code for d in b_.details} - summary, (
            a.reasons, b_.reasons)
    assert a.rejected == b_.rejected


@pytest.mark.parametrize("kube", KUBE)
@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_inventory_answers_as_the_snapshot_path(case: tuple[str, list[str], str],
                                                kube: str) -> None:
    _, inv_paths, wl_path = case
    expected = snapshot_answer(inv_paths, wl_path, kube)
    objects = inventory_objects(inv_paths, wl_path)
    g = gang_from(inv_paths, wl_path)
    same(fed(objects, kube).plan(g), expected)
    same(fed(list(reversed(objects)), kube).plan(g), expected)  # order does not matter
    # Everything deleted and added again, one event at a time, after a first decision.
    inv = fed(objects, kube)
    inv.plan(g)
    for obj in objects:
        inv.apply("DELETED", obj)
    assert not inv.nodes()
    for obj in objects:
        inv.apply("ADDED", obj)
    same(inv.plan(g), expected)


def test_the_manifest_verdicts_are_the_expected_ones() -> None:
    """What the comparison above compares is not trivially empty: the cases span fits
    and does-not-fit, and the versions differ where DeviceTaintRules apply."""
    got = {(c[0], k): snapshot_answer(c[1], c[2], k).verdict for c in CASES for k in KUBE}
    assert got[("anti-affinity", "1.36")] == "fits"
    assert got[("anti-affinity-one-node-short", "1.36")] == "unsatisfiable"
    assert got[("multihost", "1.37")] == "fits"
    assert got[("taint-rules", "1.36")] == "fits"
    assert got[("taint-rules", "1.37")] == "unsatisfiable"
    assert got[("taint-rule-without-selector", "1.37")] == "fits"


# ------------------------------------------------------------------ events


def _pod(name: str, node: str, labels: Mapping[str, str], namespace: str = "shop",
         phase: str = "Running") -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": namespace, "labels": dict(labels)},
            "spec": {"nodeName": node, "containers": [
                {"name": "c", "resources": {"requests": {"cpu": "1"}}}]},
            "status": {"phase": phase}}


def test_bound_pods_as_they_come_and_go_steer_anti_affinity() -> None:
    """Each step answered as the snapshot path answers the same objects from scratch
    (the gang's kept view is patched, not rebuilt, between steps)."""
    inv_paths = ["anti-affinity/inventory.yaml", "anti-affinity/more.yaml"]
    wl_path = "anti-affinity/workload.yaml"
    objects = inventory_objects(inv_paths, wl_path)
    inv = fed(objects, "1.36")
    g = gang_from(inv_paths, wl_path)

    def check(placed: set[str] | None) -> plan.PlanResult:
        result = inv.plan(g)
        bundle = workload.load([(o, None) for o in objects])
        snap = gang.Snapshot(bundle.nodes, bundle.inventory, bundle.used, pods=bundle.pods)
        same(result, plan.plan(g, snap, []))
        if placed is not None:
            assert {p.node for p in result.placements} == placed
        return result

    check({"node-b", "node-c"})  # db-0 is on node-a
    db = next(o for o in objects if o["kind"] == "Pod")
    inv.apply("DELETED", db)
    objects.remove(db)
    check({"node-a", "node-b"})
    for event, pod in (("ADDED", _pod("web-old", "node-b", {"app": "web"})),
                       ("ADDED", _pod("db-1", "node-c", {"app": "db"})),
                       ("MODIFIED", _pod("db-1", "node-c", {"app": "db"}, phase="Succeeded"))):
        inv.apply(event, pod)
        objects = [o for o in objects if o["metadata"]["name"] != pod["metadata"]["name"]]
        objects.append(pod)
        result = check(None)
    assert result.verdict == "fits"
    inv.apply("MODIFIED", _pod("db-1", "node-c", {"app": "db"}))
    objects[-1] = _pod("db-1", "node-c", {"app": "db"})
    result = check(None)
    assert result.verdict == "unsatisfiable"
    assert reasons.POD_AFFINITY in {d.code for d in result.details}


def test_bound_pods_anti_affinity_keeps_out_a_gang_with_no_rules_of_its_own() -> None:
    """A pod set with labels and no (anti-)affinity terms is kept off a node only by the
    anti-affinity of pods bound there; those pods are found anew as they come and go."""
    inv_paths = ["anti-affinity/inventory.yaml"]
    wl_path = "anti-affinity/workload.yaml"
    objects = inventory_objects(inv_paths, wl_path)
    inv = fed(objects, "1.36")
    (job,) = [o for o, _ in _docs([wl_path]) if o.get("kind") == "Job"]
    job = copy.deepcopy(job)
    del job["spec"]["template"]["spec"]["affinity"]
    g = workload.gang_of(job)
    guard = _pod("guard", "node-a", {"app": "guard"})
    away = {"topologyKey": "kubernetes.io/hostname",
            "labelSelector": {"matchLabels": {"app": "web"}}}
    guard["spec"]["affinity"] = {
        "podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [away]}}

    def check() -> set[str]:
        result = inv.plan(g)
        bundle = workload.load([(o, None) for o in objects])
        snap = gang.Snapshot(bundle.nodes, bundle.inventory, bundle.used, pods=bundle.pods)
        same(result, plan.plan(g, snap, []))
        assert result.verdict == "fits"
        return {p.node for p in result.placements}

    assert "node-a" in check()
    for event, pod in (("ADDED", guard), ("DELETED", guard)):
        inv.apply(event, pod)
        objects = [o for o in objects if o["metadata"]["name"] != "guard"]
        if event == "ADDED":
            objects.append(pod)
            assert "node-a" not in check()
        else:
            assert "node-a" in check()


def test_device_taint_rules_as_events_follow_the_version() -> None:
    inv_paths = ["extended-job/inventory.yaml"]
    wl_path = "extended-job/workload.yaml"
    rules = [o for o, _ in _docs(["taint-rules/rules.yaml"])]
    g = gang_from(inv_paths, wl_path)
    for kube, tainted in (("1.36", "fits"), ("1.37", "unsatisfiable")):
        inv = fed(inventory_objects(inv_paths, wl_path), kube)
        assert inv.plan(g).verdict == "fits"
        assert inv.notes() == []
        for r in rules:
            assert inv.apply("ADDED", r) == []
        result = inv.plan(g)
        assert result.verdict == tainted, result.reasons
        if kube == "1.36":
            assert inv.notes() == ["DeviceTaintRule gpu-maintenance, no-selector not applied: "
                                   "DRADeviceTaintRules is off by default in Kubernetes 1.36"]
        else:
            assert inv.notes() == []
            assert any("tainted and not tolerated" in r for r in result.reasons)
        inv.apply("DELETED", rules[0])
        assert inv.plan(g).verdict == "fits"


def test_kube_version_is_a_constructor_parameter() -> None:
    assert inventory.Inventory().kube == versions.DEFAULT
    assert inventory.Inventory(kube_version="1.37").kube == versions.V1_37
    assert inventory.Inventory(kube_version="v1.37.2").kube == versions.V1_37
    with pytest.raises(ValueError, match="not followed"):
        inventory.Inventory(kube_version="1.30")


def test_apply_reads_strictly_converts_and_is_lenient_on_request() -> None:
    node = gb.node("n1")
    typo = copy.deepcopy(node)
    typo["status"]["alocatable"] = {"cpu": "1"}
    with pytest.raises(errors.InputError, match="unknown field 'alocatable'"):
        inventory.Inventory().apply("ADDED", typo)
    lenient = inventory.Inventory(lenient=True)
    notes = lenient.apply("ADDED", typo)
    assert len(notes) == 1 and "alocatable" in notes[0] and "--lenient" in notes[0]
    assert [n.name for n in lenient.nodes()] == ["n1"]
    other_api = {**node, "apiVersion": "example.com/v1"}
    with pytest.raises(errors.InputError, match="not an API of the kinds fitgate reads"):
        inventory.Inventory().apply("ADDED", other_api)
    # Defaulting: a node with only capacity gets it as allocatable.
    only_capacity = copy.deepcopy(node)
    only_capacity["status"] = {"capacity": {"cpu": "3"}}
    inv = inventory.Inventory()
    inv.apply("ADDED", only_capacity)
    assert str(inv.nodes()[0].allocatable["cpu"]) == "3"


def test_refused_nodes_and_unknown_shapes_carry_codes() -> None:
    inv = inventory.Inventory()
    for o in [*gb.classes(), *gb.gpu_node("n1", cpu="16"), *gb.gpu_node("n2", cpu="16")]:
        inv.apply("ADDED", o)
    g = workload.gang_of(gb.workload(gb.pod_set(count=4, cpu="8", templates=("gpus",))),
                         {("default", "gpus"): gb.template(gpus=4)})
    result = inv.plan(g, shapes=["missing"], node_filter=lambda n: n.name != "n2")
    assert result.verdict == "unsatisfiable"
    assert [d.message for d in result.details] == list(result.reasons)
    assert result.details[-1].code == reasons.NODE_POLICY
    assert result.details[-1].node == "n2"
    assert [(d.code, d.shape) for d in result.rejected_details] == [
        (reasons.SHAPE_UNKNOWN, "missing")]
    verified = inv.verify(g, plan.Plan((), 0, (), frozenset()),
                          node_filter=lambda n: n.name != "n2")
    assert verified.details[-1].code == reasons.NODE_POLICY


def test_held_nodes_are_named_apart_from_policy() -> None:
    inv = inventory.Inventory()
    for o in [*gb.classes(), *gb.gpu_node("n1", cpu="16"), *gb.gpu_node("n2", cpu="16"),
              *gb.gpu_node("n3", cpu="16")]:
        inv.apply("ADDED", o)
    g = workload.gang_of(gb.workload(gb.pod_set(count=6, cpu="8", templates=("gpus",))),
                         {("default", "gpus"): gb.template(gpus=4)})
    assert inv.fit(g).verdict == "fits"
    result = inv.fit(g, node_filter=lambda n: n.name != "n1", held={"n2"})
    assert result.verdict == "unsatisfiable"
    policy, held = result.details[-2:]
    assert (policy.code, policy.node, policy.category) == (
        reasons.NODE_POLICY, "n1", "configuration")
    assert (held.code, held.node, held.category) == (reasons.NODE_HELD, "n2", "coordination")
    assert held.message == "1 node is held for other workloads until their pods are on " \
        "them (n2)"
    assert "policy" not in held.message
    # Held nodes alone: no policy reason at all.
    only_held = inv.fit(g, held={"n2", "n3"})
    assert [d.code for d in only_held.details if d.code in (
        reasons.NODE_POLICY, reasons.NODE_HELD)] == [reasons.NODE_HELD]
    assert "2 nodes are held" in only_held.reasons[-1]
    # And the unfiltered view (kept across decisions) still sees every node.
    assert inv.fit(g).verdict == "fits"


# -------------------------------------------------------------- projection


def _gpu_cluster(rng: random.Random, nodes: int, zones: int) -> list[dict[str, Any]]:
    """GPU nodes alike but for their device uuids, random GPUs in use, their zone: the
    projection puts many of them in one class."""
    out: list[dict[str, Any]] = [*gb.classes()]
    for i in range(nodes):
        name = f"n{i}"
        objs = gb.gpu_node(name, cpu="64", zone=f"z{i % zones}")
        objs[0]["metadata"]["labels"]["topology.kubernetes.io/zone"] = f"z{i % zones}"
        for d in objs[1]["spec"]["devices"]:
            d.setdefault("attributes", {})["uuid"] = {"string": f"{name}-{d['name']}"}
        out += objs
        used = rng.sample(range(8), rng.choice([0, 0, 1, 2]))
        if used:
            out.append(gb.allocated(f"busy-{name}", name, [(b.GPU, f"gpu-{j}") for j in used]))
    return out


def _anti(key: str, *apps: str) -> dict[str, Any]:
    return {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
        {"topologyKey": key,
         "labelSelector": {"matchExpressions": [{"key": "app", "operator": "In",
                                                 "values": list(apps)}]}}]}}


def _job(count: int, affinity: dict[str, Any] | None = None,
         spread: dict[str, Any] | None = None) -> dict[str, Any]:
    spec: dict[str, Any] = {"restartPolicy": "Never", "containers": [{
        "name": "c", "image": "x", "resources": {"requests": {"cpu": "4"}, "claims": [
            {"name": "gpus"}]}}],
        "resourceClaims": [{"name": "gpus", "resourceClaimTemplateName": "gpus"}]}
    if affinity:
        spec["affinity"] = affinity
    if spread:
        spec["topologySpreadConstraints"] = [spread]
    return {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "web",
                                                                  "namespace": "default"},
            "spec": {"parallelism": count, "completions": count, "template": {
                "metadata": {"labels": {"app": "web"}}, "spec": spec}}}


def _both(objects: list[dict[str, Any]], job: dict[str, Any], kube: str = "1.36"
          ) -> tuple[plan.PlanResult, plan.PlanResult, inventory.Inventory, gang.Gang]:
    """(Inventory answer, snapshot answer) for the same objects."""
    templates = {("default", "gpus"): gb.template(gpus=4, nic=False)}
    g = workload.gang_of(job, templates)
    inv = fed(objects, kube)
    bundle = workload.load([(o, None) for o in objects], kube_version=kube)
    snap = gang.Snapshot(bundle.nodes, bundle.inventory, bundle.used, pods=bundle.pods,
                         kube=versions.parse(kube))
    return inv.plan(g), plan.plan(g, snap, bundle.shapes), inv, g


def _classes(inv: inventory.Inventory, g: gang.Gang) -> dict[str, int]:
    """Each node's projected class under the gang (after a decision)."""
    state = inv._gang_state(g)
    return {name: projected.key for name, (_, projected) in state.shared.entries.items()}


def test_projection_merges_nodes_yet_anti_affinity_sees_each_node() -> None:
    rng = random.Random(7)
    objects = _gpu_cluster(rng, 12, zones=3)
    # Bound pods the gang's anti-affinity selects on some nodes: their nodes are alike
    # otherwise (the pods ask for no GPU and 1 cpu of 64).
    objects += [_pod(f"db-{i}", f"n{i}", {"app": "db"}, namespace="default")
                for i in (0, 4, 5)]
    got, expected, inv, g = _both(objects, _job(6, _anti("kubernetes.io/hostname", "web",
                                                          "db")))
    same(got, expected, text=False)
    assert got.verdict == "fits"
    assert not {"n0", "n4", "n5"} & {p.node for p in got.placements}
    assert len({p.node for p in got.placements}) == 6
    classes = _classes(inv, g)
    assert len(set(classes.values())) < len(classes)  # nodes were merged ...
    merged = [n for n in ("n0", "n4", "n5")
              if any(classes[n] == classes[m] for m in classes if m not in ("n0", "n4", "n5"))]
    assert merged  # ... including a node with a db pod and one without


def test_projection_merges_nodes_yet_zone_anti_affinity_and_spread_see_each_node() -> None:
    rng = random.Random(11)
    objects = _gpu_cluster(rng, 9, zones=3)
    objects.append(_pod("db-0", "n1", {"app": "db"}, namespace="default"))  # zone z1
    zone = "topology.kubernetes.io/zone"
    got, expected, _, _ = _both(objects, _job(2, _anti(zone, "web", "db")))
    same(got, expected, text=False)
    assert got.verdict == "fits"
    assert sorted(int(p.node[1:]) % 3 for p in got.placements) == [0, 2]  # not z1's
    spread = {"maxSkew": 1, "topologyKey": zone, "whenUnsatisfiable": "DoNotSchedule",
              "labelSelector": {"matchLabels": {"app": "web"}}}
    # fitcore checks spread as at most maxSkew pods of the set per domain.
    got, expected, _, _ = _both(objects, _job(3, spread=spread))
    same(got, expected, text=False)
    assert got.verdict == "fits"
    assert sorted(int(p.node[1:]) % 3 for p in got.placements) == [0, 1, 2]
    got, expected, _, _ = _both(objects, _job(4, spread=spread))
    same(got, expected, text=False)
    assert got.verdict == "unsatisfiable"


def test_projection_keeps_nodes_apart_that_taint_rules_tell_apart() -> None:
    rng = random.Random(3)
    objects = _gpu_cluster(rng, 6, zones=1)
    for o in objects:  # no GPU in use: every node alike under the projection
        if o["kind"] == "ResourceClaim":
            objects.remove(o)
    rule = {"apiVersion": "resource.k8s.io/v1beta2", "kind": "DeviceTaintRule",
            "metadata": {"name": "drain-n2"},
            "spec": {"deviceSelector": {"driver": b.GPU, "pool": "n2-gpu"},
                     "taint": {"key": "maintenance", "effect": "NoSchedule"}}}
    # Two pods per node (4 GPUs of one root each); n2's GPUs are all tainted.
    got, expected, inv, g = _both([*objects, rule], _job(10), kube="1.37")
    same(got, expected, text=False)
    assert got.verdict == "fits"
    assert "n2" not in {p.node for p in got.placements}
    classes = _classes(inv, g)
    assert classes["n2"] != classes["n1"] and classes["n1"] == classes["n3"]
    got, expected, _, _ = _both([*objects, rule], _job(11), kube="1.37")
    same(got, expected, text=False)
    assert got.verdict == "unsatisfiable"
    got, expected, _, _ = _both([*objects, rule], _job(12), kube="1.36")  # not applied
    same(got, expected, text=False)
    assert got.verdict == "fits"


def test_projection_keeps_advertising_and_dra_nodes_apart() -> None:
    """example.com/gpu: a node that advertises it (all in use) and one whose devices back
    it through a DeviceClass free 0 of it alike; only the second can host the pod."""
    dc = {"apiVersion": "resource.k8s.io/v1", "kind": "DeviceClass",
          "metadata": {"name": "gpu.example.com"},
          "spec": {"selectors": [{"cel": {"expression": "device.driver == 'gpu.example.com'"}}],
                   "extendedResourceName": "example.com/gpu"}}
    objects: list[dict[str, Any]] = [dc]
    for name, advertised in (("a-plugin", "2"), ("b-dra", None)):
        node = gb.node(name, cpu="32")
        if advertised:
            node["status"]["allocatable"]["example.com/gpu"] = advertised
        objects.append(node)
        objects.append(b.rslice(f"{name}-gpus", [b.device(f"gpu-{i}") for i in range(2)],
                                node=name, pool=name, driver="gpu.example.com"))
        objects.append({"apiVersion": "v1", "kind": "Pod", "metadata": {
            "name": f"user-{name}", "namespace": "x"}, "spec": {"nodeName": name, "containers": [
                {"name": "c", "resources": {"requests": {"example.com/gpu": advertised or "0"}}}]},
            "status": {"phase": "Running"}})
    job = {"apiVersion": "batch/v1", "kind": "Job",
           "metadata": {"name": "ext", "namespace": "default"},
           "spec": {"parallelism": 1, "template": {"spec": {
               "restartPolicy": "Never", "containers": [{"name": "c", "image": "x",
                                                         "resources": {"limits": {
                                                             "example.com/gpu": "2"}}}]}}}}
    g = workload.gang_of(job, {})
    inv = fed(objects, "1.36")
    bundle = workload.load([(o, None) for o in objects])
    snap = gang.Snapshot(bundle.nodes, bundle.inventory, bundle.used, pods=bundle.pods)
    expected = plan.plan(g, snap, [])
    got = inv.plan(g)
    same(got, expected, text=False)
    assert got.verdict == "fits" and [p.node for p in got.placements] == ["b-dra"]
    classes = _classes(inv, g)
    assert classes["a-plugin"] != classes["b-dra"]
    view = projection.device_view(g, inv._classes)
    assert view.read is not None  # the class's selector reads no attribute: still exact


@pytest.mark.parametrize("seed", range(24))
def test_random_clusters_with_pod_rules_answer_as_the_snapshot_path(seed: int) -> None:
    """Random GPU clusters (uuids, GPUs in use, zones), bound pods with random labels,
    and a gang with random anti-affinity, affinity or spread: the projected Inventory
    answers as the unprojected snapshot does."""
    rng = random.Random(seed)
    objects = _gpu_cluster(rng, rng.randint(4, 10), zones=rng.randint(1, 3))
    nodes = [o["metadata"]["name"] for o in objects if o["kind"] == "Node"]
    for i in range(rng.randint(0, 6)):
        objects.append(_pod(f"p{i}", rng.choice(nodes), {"app": rng.choice(["db", "web", "x"])},
                            namespace="default"))
    key = rng.choice(["kubernetes.io/hostname", "topology.kubernetes.io/zone"])
    roll = rng.random()
    affinity = spread = None
    if roll < 0.5:
        affinity = _anti(key, *rng.sample(["web", "db", "x"], rng.randint(1, 2)))
    elif roll < 0.75:
        affinity = {"podAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
            {"topologyKey": key, "labelSelector": {"matchLabels": {
                "app": rng.choice(["db", "web"])}}}]}}
    else:
        spread = {"maxSkew": rng.randint(1, 2), "topologyKey": key,
                  "whenUnsatisfiable": "DoNotSchedule",
                  "labelSelector": {"matchLabels": {"app": "web"}}}
    got, expected, _, _ = _both(objects, _job(rng.randint(1, 8), affinity, spread),
                                rng.choice(KUBE))
    same(got, expected, text=False)
