"""FitPolicy: parsing with every bad field named, who a policy is about, how policies
combine, reservations, and that a policy forbidding a shape changes the plan."""

from __future__ import annotations

import pathlib
from typing import Any

import pytest
import yaml

from admission.engine import fitting
from admission.kube import kinds
from admission.policy import fitpolicy as policy
from fitcore import model, workload
from tests.admission import builders as ab
from tests.admission import crd
from tests.gang import builders as gb


def node(name: str, **labels: str) -> model.Node:
    return model.Node(name, labels)


def scope(*policies: dict[str, Any], shapes: list[dict[str, Any]] | None = None,
          namespace: str = "team-a", ns_labels: dict[str, str] | None = None,
          cq: str | None = "gpu", cq_labels: dict[str, str] | None = None) -> policy.Scope:
    parsed = [policy.parse(p) for p in policies]
    return policy.scope(parsed, shapes or [], namespace=namespace,
                        namespace_labels=ns_labels or {}, cluster_queue=cq,
                        cluster_queue_labels=cq_labels or {})


def shape_obj(name: str, **labels: str) -> dict[str, Any]:
    return {"metadata": {"name": name, "labels": labels}}


def test_every_bad_field_is_named() -> None:
    bad = ab.fit_policy("p", subjects={"namespaces": "team-a"},
                        nodes={"matchExpressions": [{"key": "k", "operator": "Near"}]},
                        nodeShapes=["x"], reserved={"nodes": {}}, enforcement="block")
    with pytest.raises(policy.PolicyError) as exc:
        policy.parse(bad)
    paths = [p for p, _ in exc.value.problems]
    assert paths == ["spec.subjects.namespaces", "spec.nodes.matchExpressions[0].operator",
                     "spec.nodeShapes", "spec.reserved.nodes", "spec.enforcement"]
    assert "FitPolicy p: spec.enforcement: must be warn or deny" in str(exc.value)


def test_no_policy_allows_everything() -> None:
    s = scope()
    assert s.node_filter is None and s.shapes is None and not s.restricted
    assert s.enforcement == "warn" and s.description == "no FitPolicy applies"


SUBJECTS = [
    ("namespace by name", {"namespaces": ["team-a"]}, True),
    ("other namespace", {"namespaces": ["team-b"]}, False),
    ("namespace by label", {"namespaceSelector": {"matchLabels": {"tier": "gold"}}}, True),
    ("cluster queue by name", {"clusterQueues": ["gpu"]}, True),
    ("cluster queue by label", {"clusterQueueSelector": {"matchExpressions": [
        {"key": "team", "operator": "In", "values": ["a", "b"]}]}}, True),
    ("cluster queue label absent", {"clusterQueueSelector": {"matchExpressions": [
        {"key": "team", "operator": "DoesNotExist"}]}}, False),
    ("everyone", {}, True),
]


@pytest.mark.parametrize(("subjects", "applies"), [c[1:] for c in SUBJECTS],
                         ids=[c[0] for c in SUBJECTS])
def test_who_a_policy_is_about(subjects: dict[str, Any], applies: bool) -> None:
    p = ab.fit_policy("p", subjects=subjects, nodes={"matchLabels": {"pool": "a"}})
    s = scope(p, ns_labels={"tier": "gold"}, cq_labels={"team": "a"})
    assert (s.applied == ("p",)) is applies
    assert s.node_filter is not None if applies else s.node_filter is None


def test_matching_policies_combine_by_union_and_deny_wins() -> None:
    a = ab.fit_policy("a", nodes={"matchLabels": {"pool": "a"}},
                      nodeShapes={"names": ["small"]})
    b = ab.fit_policy("b", nodes={"matchLabels": {"pool": "b"}},
                      nodeShapes={"selector": {"matchLabels": {"tier": "big"}}},
                      enforcement="deny")
    s = scope(a, b, shapes=[shape_obj("small"), shape_obj("large", tier="big"),
                            shape_obj("other")])
    assert s.node_filter is not None
    assert s.node_filter(node("n1", pool="a")) and s.node_filter(node("n2", pool="b"))
    assert not s.node_filter(node("n3", pool="c"))
    assert s.shapes == {"small", "large"}
    assert s.enforcement == "deny"
    assert "nodes matching pool=a or pool=b" in s.description


def test_reserved_nodes_and_shapes_are_kept_from_everyone_else() -> None:
    reserve = ab.fit_policy("team-b", subjects={"namespaces": ["team-b"]},
                            reserved={"nodes": {"matchLabels": {"pool": "b"}},
                                      "nodeShapes": ["b-only"]})
    shapes = [shape_obj("b-only"), shape_obj("shared")]
    other = scope(reserve, shapes=shapes, namespace="team-a")
    assert other.node_filter is not None
    assert not other.node_filter(node("n", pool="b"))
    assert other.node_filter(node("n", pool="shared"))
    assert other.shapes == {"shared"}
    owner = scope(reserve, shapes=shapes, namespace="team-b")
    assert owner.node_filter is None and owner.shapes is None


def test_the_scope_key_changes_with_the_policies() -> None:
    p1 = ab.fit_policy("p", nodes={"matchLabels": {"pool": "a"}})
    p2 = {**p1, "metadata": {"name": "p", "resourceVersion": "2"}}
    assert scope(p1).key != scope(p2).key
    assert scope(p1).key == scope(p1).key


def test_a_policy_forbidding_a_shape_changes_the_plan() -> None:
    # 6 GPUs on one root: only new nodes of a one-root shape fit. The cheap one is
    # forbidden to team-a, so the plan takes the pricier one.
    objects = [ab.cluster(1), gb.template("gpus", gpus=6, namespace=ab.NS),
               gb.shape("cheap", gpus=8, roots=1, price=5),
               gb.shape("pricey", gpus=8, roots=1, price=20)]
    stores = ab.stores(objects)
    engine = fitting.StoreEngine(stores)
    gang_ = fitting.gang_of(ab.job(), stores)
    free = engine.plan(gang_)
    assert free.plan is not None and free.plan.shapes[0].shape == "cheap"
    forbid = ab.fit_policy("team-a", subjects={"namespaces": [ab.NS]},
                           nodeShapes={"names": ["pricey"]})
    s = scope(forbid, shapes=[gb.shape("cheap"), gb.shape("pricey")])
    scoped = engine.plan(gang_, shapes=s.shapes, node_filter=s.node_filter)
    assert scoped.plan is not None and scoped.plan.shapes[0].shape == "pricey"
    assert scoped.plan.price > free.plan.price


def test_a_policy_limiting_nodes_keeps_the_gang_off_the_others() -> None:
    objects = [ab.cluster(2), gb.template("gpus", gpus=4, namespace=ab.NS)]
    stores = ab.stores(objects)
    engine = fitting.StoreEngine(stores)
    gang_ = fitting.gang_of(ab.job(parallelism=2), stores)
    only_gpu_1 = scope(ab.fit_policy("p", nodes={"matchLabels": {
        "kubernetes.io/hostname": "gpu-1"}}))
    result = engine.plan(gang_, node_filter=only_gpu_1.node_filter)
    assert result.verdict == "fits"
    assert {p.node for p in result.placements} == {"gpu-1"}


# --------------------------------------------------------------------------- the CRDs

EXAMPLES = pathlib.Path(__file__).resolve().parents[3] / "examples" / "shapes"


@pytest.mark.parametrize("name", ["nodeshapes.fitgate.io", "fitpolicies.fitgate.io"])
def test_crds_serve_v1alpha1_cluster_scoped_with_status_and_printer_columns(name: str) -> None:
    c = crd.load(name)
    assert c["apiVersion"] == "apiextensions.k8s.io/v1"
    assert c["spec"]["group"] == "fitgate.io" and c["spec"]["scope"] == "Cluster"
    [version] = c["spec"]["versions"]
    assert version["name"] == "v1alpha1" and version["served"] and version["storage"]
    assert version["subresources"] == {"status": {}}
    columns = version["additionalPrinterColumns"]
    assert len(columns) >= 3
    for col in columns:
        assert col["jsonPath"] == ".metadata.creationTimestamp" or crd.has_path(
            crd.schema(c), col["jsonPath"]), col


def _shapes() -> list[dict[str, Any]]:
    return [d for p in sorted(EXAMPLES.glob("*.yaml")) for d in yaml.safe_load_all(
        p.read_text()) if d]


def test_the_example_node_shapes_are_valid_node_shapes() -> None:
    s = crd.schema(crd.load("nodeshapes.fitgate.io"))
    shapes = [*_shapes(), gb.shape("builder-made", max_nodes=4)]
    assert len(shapes) >= 3
    for obj in shapes:
        assert crd.check(s, obj) == [], obj["metadata"]["name"]


def test_a_node_shape_needs_no_pool_bookkeeping() -> None:
    s = crd.schema(crd.load("nodeshapes.fitgate.io"))
    for obj in _shapes():
        written = yaml.safe_load(yaml.safe_dump(obj))
        for sl in written["spec"]["resourceSlices"]:
            sl["pool"] = {"name": sl["pool"]["name"]}  # no generation, no resourceSliceCount
        assert crd.check(s, written) == []
        stored = crd.defaulted(s, written)
        assert stored["spec"]["resourceSlices"][0]["pool"] == {
            "name": written["spec"]["resourceSlices"][0]["pool"]["name"], "generation": 0,
            "resourceSliceCount": 1}
        assert workload.node_shape(stored) == workload.node_shape(obj)
    minimal = {"apiVersion": "fitgate.io/v1alpha1", "kind": "NodeShape",
               "metadata": {"name": "a100"},
               "spec": {"nodeLabels": {"pool": "a100"}, "allocatable": {"cpu": "32"},
                        "resourceSlices": [{"driver": "gpu.example.com", "devices": [
                            {"name": "gpu-0", "attributes": {"model": {"string": "A100"}}}]}]}}
    assert crd.check(s, minimal) == []
    parsed = workload.node_shape(crd.defaulted(s, minimal))
    assert parsed.price == 0 and len(parsed.slices[0].devices) == 1


def test_node_shape_schema_refuses_what_fitcore_refuses() -> None:
    s = crd.schema(crd.load("nodeshapes.fitgate.io"))
    bad = gb.shape("bad")
    bad["spec"]["price"] = "-1"
    bad["spec"]["topology"]["nodesPerDomain"] = 0
    bad["spec"]["taints"] = [{"key": "k", "effect": "Sometimes"}]
    bad["spec"]["nodeLabel"] = {"typo": "pruned"}
    problems = crd.check(s, bad)
    assert ".spec.nodeLabel: unknown field (pruned)" in problems
    assert any(".spec.price" in p for p in problems)
    assert any(".spec.topology.nodesPerDomain" in p for p in problems)
    assert any(".spec.taints[0].effect" in p for p in problems)


POLICY_EXAMPLE = """
apiVersion: fitgate.io/v1alpha1
kind: FitPolicy
metadata: {name: team-a}
spec:
  subjects:
    namespaces: [team-a]
    namespaceSelector: {matchLabels: {tier: research}}
    clusterQueueSelector:
      matchExpressions: [{key: team, operator: In, values: [a]}]
  nodes: {matchLabels: {pool: shared}}
  nodeShapes: {names: [h100-rail], selector: {matchLabels: {tier: standard}}}
  reserved: {nodes: {matchLabels: {pool: team-a}}, nodeShapes: [h100-reserved]}
  enforcement: deny
"""


def test_fit_policy_schema_accepts_what_the_controller_reads() -> None:
    s = crd.schema(crd.load("fitpolicies.fitgate.io"))
    obj = yaml.safe_load(POLICY_EXAMPLE)
    assert crd.check(s, obj) == []
    parsed = policy.parse(obj)
    assert parsed.enforcement == "deny" and parsed.reserved_shapes == {"h100-reserved"}
    bare = crd.defaulted(s, {"metadata": {"name": "x"}, "spec": {}})
    assert bare["spec"]["enforcement"] == "warn"
    assert policy.parse(bare).subjects.everyone
    wrong = yaml.safe_load(POLICY_EXAMPLE)
    wrong["spec"]["enforcement"] = "block"
    assert any("enforcement" in p for p in crd.check(s, wrong))


def test_node_shape_status_keeps_what_the_check_records() -> None:
    # The shape of admission/check/workload.py's sync_shape_mismatches patch: a status the
    # schema would prune would be lost without an error.
    s = crd.schema(crd.load("nodeshapes.fitgate.io"))
    shape = gb.shape("h100")
    shape["status"] = {"nodes": 3, "verification": {
        "mismatchCount": 2, "lastMismatch": {
            "time": "2026-12-03T08:00:00Z", "workload": "team-a/train",
            "provisioningRequest": "train-topo-fit-1", "nodes": ["h100-abc"],
            "details": ["node h100-abc (shape h100): label x is 'y', shape promised 'z'"]}}}
    assert crd.check(s, shape) == []


# ----------------------------------------------------------------- the Valid condition


async def test_each_policy_says_whether_fitgate_can_read_it() -> None:
    import datetime

    from admission import clock
    from admission.kube import fake, kinds, store
    from admission.policy import status as policy_status

    api = fake.FakeClient()
    good = api.seed(kinds.FIT_POLICY, ab.fit_policy("good", enforcement="deny"))
    bad = api.seed(kinds.FIT_POLICY, ab.fit_policy("bad", enforcement="block"))
    policies = store.Store(kinds.FIT_POLICY)
    policies.seed(good, bad)
    ctl = policy_status.PolicyStatusController(
        api, policies, clock=clock.FakeClock(datetime.datetime(2026, 12, 3, tzinfo=datetime.UTC)))
    for name in ("good", "bad"):
        assert await ctl.reconcile(name) is None
    valid = api.find(kinds.FIT_POLICY, "good")
    invalid = api.find(kinds.FIT_POLICY, "bad")
    assert valid is not None and invalid is not None
    assert valid["status"]["conditions"] == [{
        "type": "Valid", "status": "True", "reason": "Valid",
        "message": "fitgate applies this policy", "lastTransitionTime": "2026-12-03T00:00:00Z"}]
    assert valid["status"]["observedGeneration"] == 1
    [cond] = invalid["status"]["conditions"]
    assert cond["status"] == "False" and cond["reason"] == "Invalid"
    assert "spec.enforcement: must be warn or deny, got 'block'" in cond["message"]
    # Written once: the same verdict on the same generation writes nothing.
    policies.seed(valid, invalid)
    patches = len(api.verbs("patch"))
    for name in ("good", "bad"):
        await ctl.reconcile(name)
    assert len(api.verbs("patch")) == patches
    # The status it writes is one the schema keeps (the schema itself would refuse
    # 'block'; the condition is for policies written before a schema change, or past it).
    status = crd.schema(crd.load("fitpolicies.fitgate.io"))["properties"]["status"]
    assert crd.check(status, valid["status"], ".status") == []
    assert crd.check(status, invalid["status"], ".status") == []


def test_an_unreadable_node_is_left_out_and_reported_every_time() -> None:
    broken = gb.node("broken")
    broken["status"]["allocatable"]["cpu"] = "lots"
    stores = ab.stores(ab.cluster(1), broken, gb.template("gpus", gpus=4, namespace=ab.NS))
    engine = fitting.StoreEngine(stores, idle=True)
    gang_ = fitting.gang_of(ab.job(parallelism=1), stores)
    for _ in range(2):
        assert engine.plan(gang_).verdict == "fits"
        assert any("Node broken" in p and "allocatable" in p for p in engine.problems)
        stores[kinds.NODE].seed(gb.node("more"))  # a rebuild
