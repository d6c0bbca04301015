"""Reading devices fast (`kube._common_device`) gives what the strict reader gives.

Devices of the common form are read with names checked once each and their fields other
than name and attributes read once per distinct content; everything else goes to the
strict reader. Whatever the device, valid or not, the slice read with the fast path must
equal the slice read strictly, and a bad slice must be refused with the same messages.
"""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fitcore import errors, kube, model

GOOD_VALUES = st.sampled_from([{"string": "H100"}, {"string": ""}, {"string": "x" * 64},
                                {"int": 0}, {"int": -(2**63)}, {"int": 2**63 - 1},
                                {"bool": True}, {"bool": False}, {"version": "550.54.15"}])
GOOD_NAMES = st.sampled_from(["uuid", "productName", "gpu.example.com/index",
                              "resource.kubernetes.io/pcieRoot", "x" * 32])
GOOD_REST = st.fixed_dictionaries({}, optional={
    "capacity": st.sampled_from([{}, {"memory": {"value": "80Gi"}}, {
        "memory": {"value": "80Gi", "requestPolicy": {"default": "1Gi",
                                                       "validRange": {"min": "1Gi"}}}}]),
    "consumesCounters": st.just([{"counterSet": "s", "counters": {"memory": {"value": "4"}}}]),
    "taints": st.just([{"key": "k", "effect": "NoSchedule"}]),
    "allowMultipleAllocations": st.booleans(),
    "bindsToNode": st.booleans(),
    "bindingConditions": st.just(["ready"]),
})
#: One thing wrong with a device (the strict reader names each).
BAD = [
    ("name", ""), ("name", "Bad_Name"), ("name", "x" * 64), ("name", 7), ("name", None),
    ("attribute", ("bad name", {"string": "a"})), ("attribute", ("x" * 33, {"int": 1})),
    ("attribute", ("Bad_Domain/id", {"int": 1})), ("attribute", (7, {"int": 1})),
    ("attribute", ("a", {"string": "x" * 65})), ("attribute", ("a", {"string": 3})),
    ("attribute", ("a", {"int": 2**63})), ("attribute", ("a", {"int": True})),
    ("attribute", ("a", {"int": "1"})), ("attribute", ("a", {"bool": 1})),
    ("attribute", ("a", {"version": "v1"})), ("attribute", ("a", {"version": 1})),
    ("attribute", ("a", {"version": "1." + "1" * 64})),
    ("attribute", ("a", {"strings": ["a"]})), ("attribute", ("a", {"string": "a", "int": 1})),
    ("attribute", ("a", {})), ("attribute", ("a", "H100")),
    ("attribute", ("a", {"string": None})), ("attribute", ("a", {"string": "a", "int": None})),
    ("attributes", "x"), ("attributes", [{"int": 1}]),
    ("capacity", {"memory": {"value": "eighty"}}), ("capacity", {"memory": "80Gi"}),
    ("capacity", {"bad key": {"value": "1"}}), ("capacity", "80Gi"),
    ("capacity", {f"c{i}": {"value": "1"} for i in range(33)}),
    ("crowded", {f"c{i}": {"value": "1"} for i in range(30)}),  # with 3 attributes
    ("consumesCounters", [{"counters": {}}]), ("consumesCounters", "x"),
    ("taints", [{"key": "k", "effect": "Sometimes"}]), ("allowMultipleAllocations", 1),
    ("allowMultipleAllocations", "yes"), ("bindsToNode", 1), ("bindingConditions", "ready"),
    ("nodeName", "n1"), ("allNodes", True), ("nodeAllocatableResourceMappings", {"a": {}}),
    ("device", "gpu-0"), ("device", ["gpu-0"]), ("device", None),
]


@st.composite
def devices(draw: st.DrawFn) -> Any:
    """A valid device, or one with one thing wrong."""
    out: dict[str, Any] = {"name": draw(st.sampled_from(["gpu-0", "gpu-1", "x" * 63]))}
    attributes = draw(st.dictionaries(GOOD_NAMES, GOOD_VALUES, max_size=4))
    if attributes or draw(st.booleans()):
        out["attributes"] = attributes
    out.update(draw(GOOD_REST))
    if draw(st.booleans()):
        return out
    what, bad = draw(st.sampled_from(BAD))
    if what == "device":
        return bad
    if what == "crowded":
        out["capacity"] = bad
        out["attributes"] = {f"a{i}": {"int": i} for i in range(3)}
    elif what == "attribute":
        out.setdefault("attributes", {})[bad[0]] = bad[1]
    elif bad is None:
        out.pop(what, None)
    else:
        out[what] = bad
    return out


def read(devices: list[Any]) -> model.ResourceSlice | list[str]:
    obj = {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceSlice",
           "metadata": {"name": "s"}, "spec": {"driver": "gpu.example.com", "nodeName": "n1",
                                               "pool": {"name": "p", "resourceSliceCount": 1},
                                               "devices": devices}}
    try:
        return kube.resource_slice(obj)
    except errors.InputError as e:
        return [str(x) for x in e.errors]


@settings(max_examples=400, deadline=None)
@given(st.lists(devices(), min_size=1, max_size=3))
def test_fast_reading_is_the_strict_reading(raw: list[Any]) -> None:
    fast = [read(raw), read(raw)]  # the second from the kept names and contents
    with pytest.MonkeyPatch.context() as m:
        m.setattr(kube, "_common_devices", lambda raw: [None] * len(raw))
        strict = read(raw)
    assert fast[0] == strict
    assert fast[1] == strict


def test_devices_with_the_same_fields_share_what_was_read() -> None:
    devices = [{"name": f"gpu-{i}", "attributes": {"uuid": {"string": f"GPU-{i}"}},
                "capacity": {"memory": {"value": "80Gi"}}} for i in range(2)]
    got = read(devices)
    assert isinstance(got, model.ResourceSlice)
    a, b = got.devices
    assert a.attributes == {"uuid": "GPU-0"} and b.attributes == {"uuid": "GPU-1"}
    assert a.capacity is b.capacity


@pytest.mark.parametrize(("count", "taint", "refused"), [
    (64, True, None), (65, True, "must have at most 64 devices, has 65"), (65, False, None),
    (128, False, None), (129, False, "must have at most 128 devices, has 129")],
    ids=["64-tainted", "65-tainted", "65-plain", "128-plain", "129-plain"])
def test_devices_per_slice(count: int, taint: bool, refused: str | None) -> None:
    devices: list[Any] = [{"name": f"gpu-{i}"} for i in range(count)]
    if taint:
        devices[-1]["taints"] = [{"key": "k", "effect": "NoSchedule"}]
    got = read(devices)
    if refused is None:
        assert isinstance(got, model.ResourceSlice) and len(got.devices) == count
    else:
        assert got == [f"ResourceSlice s: spec.devices: {refused}"]


def test_device_names_are_unique_within_a_slice() -> None:
    # The API server refuses a slice that names a device twice; so does fitcore, by field.
    got = read([{"name": "gpu-0"}, {"name": "gpu-1"}, {"name": "gpu-0"}])
    assert got == ["ResourceSlice s: spec.devices[2].name: duplicate device name 'gpu-0'"]


def test_counter_set_names_are_unique_within_a_slice() -> None:
    counters = {"memory": {"value": "80Gi"}}
    obj = {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceSlice",
           "metadata": {"name": "s"},
           "spec": {"driver": "gpu.example.com", "nodeName": "n1",
                    "pool": {"name": "p", "resourceSliceCount": 1},
                    "sharedCounters": [{"name": "a", "counters": counters},
                                       {"name": "a", "counters": counters}]}}
    with pytest.raises(errors.InputError) as refused:
        kube.resource_slice(obj)
    assert [str(e) for e in refused.value.errors] == [
        "ResourceSlice s: spec.sharedCounters[1].name: duplicate counter set name 'a'"]
