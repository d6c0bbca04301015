"""Messages to one tenant say that nodes and shapes are reserved, never for whom nor by
which labels and shape names (issue #20 item 11)."""

from __future__ import annotations

from admission.engine import fitting
from admission.policy import fitpolicy as policy
from admission.webhook import models, review
from tests.admission import builders as ab
from tests.gang import builders as gb

#: Team B's reservation: every node of the cluster (its pool label) and one shape.
RESERVE = ab.fit_policy("team-b-reservation", subjects={"namespaces": ["team-b"]},
                        reserved={"nodes": {"matchLabels": {
                            "node.example.com/pool": "shared"}},
                            "nodeShapes": ["b-private-shape"]},
                        enforcement="deny")
SECRETS = ("team-b", "node.example.com/pool", "shared", "b-private-shape")


def test_the_scope_description_hides_whose_reservation() -> None:
    parsed = [policy.parse(RESERVE)]
    shapes = [{"metadata": {"name": "b-private-shape"}}, {"metadata": {"name": "open"}}]
    mine = policy.scope(parsed, shapes, namespace=ab.NS)
    assert "not nodes reserved for other tenants" in mine.description
    assert "not shapes reserved for other tenants" in mine.description
    assert not [s for s in SECRETS if s in mine.description], mine.description


async def test_a_tenant_refused_by_anothers_reservation_is_not_told_whose() -> None:
    # Team A's job fits only on team B's reserved nodes: a policy violation for team A.
    stores = ab.stores(ab.queued("topo-fit"), ab.cluster(2),
                       gb.template("gpus", gpus=4, namespace=ab.NS),
                       gb.shape("b-private-shape"), RESERVE)
    hooks = review.Hooks(stores, fitting.StoreEngine(stores, idle=True),
                         config=review.Config(decision_budget_seconds=30))
    request = models.AdmissionReview.model_validate(ab.review(ab.job())).request
    response = await hooks.review("validate-jobs", request)
    text = "\n".join(response.warnings)
    assert "reserved for other tenants" in text, text
    assert not [s for s in SECRETS if s in text], text
    hooks.close()
