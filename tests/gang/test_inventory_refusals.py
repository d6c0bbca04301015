"""`Inventory.apply` refuses what would break later decisions though the API server keeps
it (issue #20 item 5): a DeviceClass or a ResourceClaim whose selector does not compile
or is over the API server's cost limit, a quantity of 1e10000. Each refusal names the
object and the field and leaves the inventory as it was; the other objects of a batch
are applied and decided with."""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

import pytest

import fitcore
from fitcore import errors, inventory
from tests.fitcore import builders as b
from tests.gang import builders as gb

BAD_SYNTAX = "device.driver =="
#: Estimated at 4,431,075 (the API server's limit is 1,000,000).
OVER_COST = ("device.attributes.exists(a, device.attributes.exists(b, device.attributes"
             ".exists(c, device.attributes.exists(d, true))))")


def cluster() -> list[dict[str, Any]]:
    return [*gb.classes(), *gb.gpu_node("n1"), *gb.gpu_node("n2")]


def device_class(expression: str) -> dict[str, Any]:
    return b.dclass("odd", expression)


def pending_claim(expression: str) -> dict[str, Any]:
    return b.claim("odd", b.req("gpu", selectors=(expression,)))


def slice_capacity(value: str) -> dict[str, Any]:
    s = copy.deepcopy(gb.gpu_node("n3")[1])
    s["spec"]["devices"][0]["capacity"] = {"memory": {"value": value}}
    return s


def node_allocatable(value: str) -> dict[str, Any]:
    n = gb.node("n3")
    n["status"]["allocatable"]["cpu"] = value
    return n


def counters(value: str) -> dict[str, Any]:
    return b.counter_slice("n3-counters", {"mem": {"memory": value}}, pool="n3-gpu", node="n3")


# (id, object, what the error names: object, field)
REFUSED: list[tuple[str, Callable[[], dict[str, Any]], str, str]] = [
    ("class-does-not-compile", lambda: device_class(BAD_SYNTAX), "DeviceClass odd",
     "spec.selectors[0].cel.expression"),
    ("class-over-cost", lambda: device_class(OVER_COST), "DeviceClass odd",
     "spec.selectors[0].cel.expression"),
    ("claim-does-not-compile", lambda: pending_claim(BAD_SYNTAX), "ResourceClaim default/odd",
     "spec.devices.requests[0].exactly.selectors[0].cel.expression"),
    ("claim-over-cost", lambda: pending_claim(OVER_COST), "ResourceClaim default/odd",
     "spec.devices.requests[0].exactly.selectors[0].cel.expression"),
    ("capacity-1e10000", lambda: slice_capacity("1e10000"), "ResourceSlice n3-gpu",
     "spec.devices[0].capacity['memory'].value"),
    ("capacity-1e101", lambda: slice_capacity("1" + "0" * 101), "ResourceSlice n3-gpu",
     "spec.devices[0].capacity['memory'].value"),
    ("allocatable-1e10000", lambda: node_allocatable("1e10000"), "Node n3",
     "status.allocatable['cpu']"),
    ("counter-1e10000", lambda: counters("1e10000"), "ResourceSlice n3-counters",
     "spec.sharedCounters[0].counters['memory'].value"),
]


def gang() -> fitcore.Gang:
    return fitcore.gang_of(gb.workload(gb.pod_set(count=2, templates=("gpus",))),
                           [gb.template("gpus")], [])


@pytest.mark.parametrize(("make", "obj_label", "field"), [c[1:] for c in REFUSED],
                         ids=[c[0] for c in REFUSED])
def test_apply_refuses_naming_object_and_field(make: Callable[[], dict[str, Any]],
                                               obj_label: str, field: str) -> None:
    inv = inventory.Inventory()
    for obj in cluster():
        inv.apply("ADDED", obj)
    before = (inv.stats(), [n.name for n in inv.nodes()])
    with pytest.raises(errors.InputError) as info:
        inv.apply("ADDED", make())
    text = str(info.value)
    assert text.startswith(obj_label) and field in text, text
    assert len(text) < 2000  # the message, not the value
    assert (inv.stats(), [n.name for n in inv.nodes()]) == before


def test_the_rest_of_a_batch_is_applied_and_decided_with() -> None:
    inv = inventory.Inventory()
    refused = []
    batch = [*cluster(), *(make() for _, make, _, _ in REFUSED)]
    for obj in batch:
        try:
            inv.apply("ADDED", obj)
        except errors.InputError as exc:
            refused.append(str(exc).split(":")[0])
    assert len(refused) == len(REFUSED)
    assert sorted(n.name for n in inv.nodes()) == ["n1", "n2"]
    result = inv.plan(gang())
    assert result.verdict == "fits"


def test_an_allocated_claim_with_a_bad_selector_still_holds_its_devices() -> None:
    inv = inventory.Inventory()
    for obj in cluster():
        inv.apply("ADDED", obj)
    # Every GPU of both nodes held by one claim whose spec does not compile.
    held = b.allocated("odd", *[(b.GPU, f"{n}-gpu", f"gpu-{i}")
                                for n in ("n1", "n2") for i in range(8)])
    held["spec"] = pending_claim(BAD_SYNTAX)["spec"]
    notes = inv.apply("ADDED", held)
    assert any("ResourceClaim default/odd" in n and "allocation is counted" in n
               for n in notes)
    assert inv.plan(gang()).verdict != "fits"
