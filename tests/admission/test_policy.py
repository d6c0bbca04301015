"""FitPolicy: parsing with every bad field named, who a policy is about, how policies
combine, reservations, and that a policy forbidding a shape changes the plan."""

from __future__ import annotations

from typing import Any

import pytest

from admission import fitting, policy
from fitcore import model
from tests.admission import builders as ab
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
