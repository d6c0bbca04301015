"""Pure builders and readers of ProvisioningRequests: names, plan JSON, conditions."""

from __future__ import annotations

from fractions import Fraction
from typing import Any

import pytest

from admission import constants as c
from admission.check import predicates, provisioning
from fitcore import gang, plan, shapes


def test_names_are_deterministic_and_limited() -> None:
    assert provisioning.request_name("train", "fitgate", 1) == "train-fitgate-1"
    assert provisioning.request_name("train", "fitgate", 2, 1) == "train-fitgate-2-alt1"
    long = provisioning.request_name("w" * 250, "fitgate", 1)
    assert len(long) == 253
    assert long == provisioning.request_name("w" * 250, "fitgate", 1)
    assert long != provisioning.request_name("w" * 250, "fitgate", 2)
    assert len(provisioning.template_name(long, "h100")) <= 253


@pytest.mark.parametrize("text,valid", [("train", True), ("x" * 63, True),
                                        ("x" * 64, False), ("team/a", False)])
def test_label_values(text: str, valid: bool) -> None:
    out = provisioning.label_value(text)
    assert len(out) <= 63
    assert (out == text) is valid
    assert out == provisioning.label_value(text)


def test_plan_round_trips_through_json() -> None:
    p = plan.Plan((plan.ShapeCount("h100", 2, "rack-new-0"), plan.ShapeCount("cpu", 1)),
                  Fraction(45, 2), (gang.Placement("w", 0, "h100-new-0"),),
                  frozenset({"n1"}), {"w": "rack-new-0"})
    back = provisioning.plan_from_json(provisioning.plan_to_json(p), {"n1"})
    assert back == p
    assert provisioning.plans_from_json(provisioning.plans_to_json([p, p])) == [
        dataclass_without_existing(p)] * 2
    assert provisioning.describe_plan(p) == "2 × h100 + 1 × cpu"


def dataclass_without_existing(p: plan.Plan) -> plan.Plan:
    return plan.Plan(p.shapes, p.price, p.placements, frozenset(), p.domains)


@pytest.mark.parametrize("text", ["", "{}", '{"shapes": []}', '{"shapes": [{"count": 1}]}',
                                  '{"shapes": [{"shape": "a", "count": 0}]}'])
def test_unreadable_plans_are_errors(text: str) -> None:
    with pytest.raises(provisioning.PlanFormatError):
        provisioning.plan_from_json(text)


def pr(*conds: tuple[str, str]) -> dict[str, Any]:
    return {"status": {"conditions": [{"type": t, "status": s} for t, s in conds]}}


@pytest.mark.parametrize("conds,state", [
    ((), "pending"),
    (((c.ACCEPTED, "True"),), "accepted"),
    (((c.ACCEPTED, "True"), (c.PROVISIONED, "False")), "accepted"),
    (((c.PROVISIONED, "True"),), "provisioned"),
    (((c.PROVISIONED, "True"), (c.BOOKING_EXPIRED, "True")), "booking-expired"),
    (((c.PROVISIONED, "True"), (c.CAPACITY_REVOKED, "True")), "capacity-revoked"),
    (((c.PROVISIONED, "True"), (c.FAILED, "True")), "failed"),
], ids=lambda v: v if isinstance(v, str) else "")
def test_request_state_follows_kueues_order(conds: tuple[tuple[str, str], ...],
                                            state: str) -> None:
    assert provisioning.state(pr(*conds))[0] == state


def test_shape_of_new_node() -> None:
    assert provisioning.shape_of_new_node("h100-new-3", {"h100"}) == "h100"
    assert provisioning.shape_of_new_node("gpu-new-x-new-1", {"gpu-new-x"}) == "gpu-new-x"
    assert provisioning.shape_of_new_node("n1", {"h100"}) is None
    assert provisioning.shape_of_new_node("other-new-1", {"h100"}) is None


# ---------------------------------------------------------------- predicates


def wl(*conds: tuple[str, str]) -> dict[str, Any]:
    return {"status": {"conditions": [{"type": t, "status": s} for t, s in conds]}}


@pytest.mark.parametrize("conds,state,ok", [
    ((), "Retry", True),
    (((c.EVICTED, "True"),), "Retry", False),
    (((c.EVICTED, "True"),), "Rejected", False),
    (((c.EVICTED, "True"),), "Pending", True),
    (((c.EVICTED, "False"),), "Retry", True),
    (((c.FINISHED, "True"),), "Pending", False),
    (((c.FINISHED, "True"),), "Retry", False),
])
def test_never_retry_or_reject_while_evicted_or_finished(conds: tuple[tuple[str, str], ...],
                                                         state: str, ok: bool) -> None:
    assert predicates.may_write(wl(*conds), state) is ok


@pytest.mark.parametrize("retries,seconds", [(0, 60), (1, 120), (4, 960), (5, 1800),
                                             (99, 1800)])
def test_backoff(retries: int, seconds: int) -> None:
    assert predicates.backoff(retries, 60, 1800) == seconds


def test_messages_are_one_line_led_by_the_category() -> None:
    m = predicates.message("capacity", "a\nb   c", limit=14)
    assert m == "capacity: a…"
    # Limits count bytes, as the API does for an Event's note: never over, even with
    # multi-byte text and the ellipsis.
    long = predicates.message(None, "× " * 600, limit=1024)
    assert len(long.encode()) <= 1024 and long.endswith("…")
    assert predicates.message("coordination", "x") == "coordination: x"


def test_entry_keeps_its_transition_time_unless_the_state_changes() -> None:
    import datetime

    now = datetime.datetime(2026, 1, 2, tzinfo=datetime.UTC)
    cur = {"name": "fitgate", "state": "Pending", "message": "a",
           "lastTransitionTime": "2026-01-01T00:00:00Z"}
    same = predicates.desired_entry(cur, predicates.Verdict("Pending", "b"), now)
    assert same["lastTransitionTime"] == "2026-01-01T00:00:00Z"
    assert predicates.changed(cur, same)
    moved = predicates.desired_entry(cur, predicates.Verdict("Retry", "b", requeue_after=5),
                                     now)
    assert moved["lastTransitionTime"] == "2026-01-02T00:00:00Z"
    assert moved["requeueAfterSeconds"] == 5
    assert not predicates.changed({**cur, "message": "b"},
                                  predicates.desired_entry(cur, predicates.Verdict(
                                      "Pending", "b"), now))


def test_placeholders_avoid_the_existing_nodes_of_their_group_only() -> None:
    rail = shapes.NodeShape("rail", node_labels={"pool": "rail"})
    p = plan.Plan((plan.ShapeCount("rail", 1),), Fraction(1), (),
                  frozenset({"r1", "r2", "cpu", "gone"}), {})
    labels = {"r1": {"pool": "rail", "zone": "a"}, "r2": {"pool": "rail"},
              "cpu": {"pool": "cpu"}}
    # "gone" has no labels known: listed, to be safe; "cpu" cannot match the selector.
    assert provisioning._avoid(p, rail, labels) == ["gone", "r1", "r2"]
    assert provisioning._avoid(p, rail, None) == ["cpu", "gone", "r1", "r2"]


def test_placeholders_avoid_the_same_nodes_with_an_index_of_matching_nodes() -> None:
    rail = shapes.NodeShape("rail", node_labels={"pool": "rail"})
    p = plan.Plan((plan.ShapeCount("rail", 1),), Fraction(1), (),
                  frozenset({"r1", "r2", "cpu", "gone"}), {})
    # Every node's labels, more nodes than the plan's existing ones among them.
    labels = {"r1": {"pool": "rail", "zone": "a"}, "r2": {"pool": "rail"},
              "cpu": {"pool": "cpu"}, "r9": {"pool": "rail"}}

    def matching(wanted: dict[str, str]) -> frozenset[str]:
        return frozenset(n for n, have in labels.items() if wanted.items() <= have.items())
    assert provisioning._avoid(p, rail, labels, matching) == ["gone", "r1", "r2"] \
        == provisioning._avoid(p, rail, labels)
