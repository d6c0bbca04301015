"""The compiled reader (`fitcore/_read.pyx`) answers as its Python reference does.

- `schema.unknown_fields` (compiled `Schema.unknown_fields`) against `schema._unknown_fields`
  on objects generated from the schemas, with unknown fields planted anywhere and values of
  the wrong shape;
- `kube._common_devices` (compiled `DeviceReader.read`) against `kube._common_device` of
  each device, on lists of valid and invalid devices whose other fields (capacity,
  counters, taints, flags) repeat from device to device, as in a real slice, and differ
  from each other only in a type (`True` / `1`) or an order.

The `reader` fixture (conftest.py) runs a test with the compiled reader and with the
reference.
"""

from __future__ import annotations

import types
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fitcore import kube, model, read, schema
from tests.fitcore import test_device_reading as reading

compiled_only = pytest.mark.skipif(schema.compiled is None, reason="the compiled reader is "
                                   "off (FITCORE_NO_EXTENSIONS=1)")


# ------------------------------------------------------------------ unknown fields

UNKNOWN_KEYS = st.sampled_from(["bogus", "nme", "Name", "", "x.y", 7, None])


def _models() -> dict[str, dict[str, str]]:
    models: dict[str, dict[str, str]] = schema._data()["models"]
    return models


def _kind_models() -> list[str]:
    return sorted(set(schema._data()["kinds"].values()))


@st.composite
def _value(draw: st.DrawFn, typ: str, depth: int) -> Any:
    """A value for a field of type `typ`: mostly of its shape, with unknown fields
    planted and, now and then, a value of another shape."""
    models = _models()
    if draw(st.integers(0, 15)) == 0:  # the wrong shape
        return draw(st.sampled_from(["text", 3, True, None, ["a"], {"bogus": 1}, [{"x": 1}]]))
    if typ.startswith("list["):
        if depth <= 0:
            return []
        return draw(st.lists(_value(typ[5:-1], depth - 1), max_size=3))
    if typ.startswith("dict("):
        inner = typ[typ.index(",") + 1:-1].strip()
        if depth <= 0:
            return {}
        got = draw(st.dictionaries(st.sampled_from(["a", "b/c", "memory"]),
                                   _value(inner, depth - 1), max_size=2))
        return types.MappingProxyType(got) if draw(st.integers(0, 9)) == 0 else got
    if typ in models and typ not in schema._PRIMITIVES:
        out: dict[Any, Any] = {}
        if depth > 0:
            names = draw(st.lists(st.sampled_from(sorted(models[typ])), max_size=4,
                                  unique=True))
            for name in names:
                out[name] = draw(_value(models[typ][name], depth - 1))
        for key in draw(st.lists(UNKNOWN_KEYS, max_size=1 if depth > 0 else 0)):
            out[key] = draw(st.sampled_from([1, "v", {"x": 1}]))
        return types.MappingProxyType(out) if draw(st.integers(0, 19)) == 0 else out
    return draw(st.sampled_from(["v", 1, True, 1.5, None]))


@st.composite
def _documents(draw: st.DrawFn) -> tuple[Any, str]:
    model_name = draw(st.sampled_from(_kind_models()))
    return draw(_value(model_name, 6)), model_name


@compiled_only
@settings(max_examples=400, deadline=None)
@given(_documents())
def test_unknown_fields_compiled_is_the_reference(doc: tuple[Any, str]) -> None:
    obj, model_name = doc
    walker = schema._compiled_schema()
    assert walker.unknown_fields(obj, model_name) == schema._unknown_fields(obj, model_name)


SLICE = {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceSlice", "metadata": {
    "name": "s", "labels": {"a": "b"}, "managedFields": [{"manager": "m", "bogus": 1}]},
         "spec": {"driver": "gpu.example.com", "nodeName": "n1", "pool": {
             "name": "p", "resourceSliceCount": 1, "generation": 3, "gen": 4},
                  "devices": [{"name": "gpu-0", "attributes": {"uuid": {"string": "a"}},
                               "capacity": {"memory": {"value": "1", "vaule": "2"}}},
                              {"name": "gpu-1", "basic": {}, "taints": [
                                  {"key": "k", "effect": "NoSchedule", "efect": "x"}]}]}}


def test_unknown_fields_of_a_slice(reader: str) -> None:
    assert schema.unknown_fields(SLICE, "V1ResourceSlice") == [
        "metadata.managedFields[0].bogus", "spec.devices[0].capacity['memory'].vaule",
        "spec.devices[1].basic", "spec.devices[1].taints[0].efect", "spec.pool.gen"]
    got = read.one(SLICE)
    assert len(got.problems) == 5
    assert str(got.problems[0]) == (
        "ResourceSlice s: metadata.managedFields[0].bogus: unknown field 'bogus' (the API "
        "server refuses it under strict field validation; --lenient ignores it)")


# ------------------------------------------------------------------ devices

#: Other fields of a device, in groups of ones alike but for a type, an order or a value:
#: consecutive devices of a slice that share them are read once in the compiled reader.
TWINS = [
    [{}, {"nodeName": "n1"}, {"capacity": None}, {"taints": None}],
    [{"capacity": {"memory": {"value": "80Gi"}}}, {"capacity": {"memory": {"value": 80}}},
     {"capacity": {"memory": {"value": 80.0}}}, {"capacity": {"memory": {"value": True}}},
     {"capacity": {"memory": {"value": "80Gi", "requestPolicy": {"default": "1Gi"}}}}],
    [{"capacity": {"memory": {"value": "80Gi"}, "cores": {"value": "4"}}},
     {"capacity": {"cores": {"value": "4"}, "memory": {"value": "80Gi"}}},
     {"capacity": {f"c{i}": {"value": "1"} for i in range(30)}}],
    [{"allowMultipleAllocations": True}, {"allowMultipleAllocations": 1},
     {"allowMultipleAllocations": False}, {"allowMultipleAllocations": 0}],
    [{"bindsToNode": True}, {"bindsToNode": "true"}, {"bindingConditions": ["ready"]},
     {"bindingConditions": [1]}],
    [{"taints": [{"key": "k", "effect": "NoSchedule"}]},
     {"taints": [{"key": "k", "effect": "NoSchedul"}]},
     {"taints": [{"key": "k", "effect": "NoSchedule"}], "bindsToNode": True},
     {"bindsToNode": True, "taints": [{"key": "k", "effect": "NoSchedule"}]}],
    [{"consumesCounters": [{"counterSet": "s", "counters": {"memory": {"value": "4"}}}]},
     {"consumesCounters": [{"counterSet": "s", "counters": {"memory": {"value": 4}}}]},
     {"consumesCounters": [{"counterSet": "s", "counters": {"memory": {"value": "4"}}}] * 3}],
]
#: Attribute values, with bad ones at the edges of good ones.
ATTRIBUTES = st.dictionaries(reading.GOOD_NAMES, st.one_of(reading.GOOD_VALUES, st.sampled_from([
    {"int": 2**63}, {"int": -(2**63) - 1}, {"int": True}, {"bool": 1}, {"string": "x" * 65},
    {"version": "v1"}, {"version": "1.2.3", "int": None}, {"strings": ["a"]}, {}])),
                             max_size=4)


@st.composite
def _device_lists(draw: st.DrawFn) -> list[Any]:
    """Devices whose other fields come from one or two groups of TWINS (so that they
    repeat, or nearly), some with one thing wrong (test_device_reading's BAD)."""
    rests = [r for group in draw(st.lists(st.sampled_from(TWINS), min_size=1, max_size=2))
             for r in group]
    out: list[Any] = []
    for i in range(draw(st.integers(1, 8))):
        if draw(st.integers(0, 5)) == 0:
            out.append(draw(reading.devices()))
            continue
        device: dict[str, Any] = {"name": f"gpu-{i}"}
        if draw(st.booleans()):
            device["attributes"] = draw(ATTRIBUTES)
        before = draw(st.booleans())  # other fields before or after the attributes
        rest = {k: v for k, v in draw(st.sampled_from(rests)).items()}
        out.append({**rest, **device} if before else {**device, **rest})
    return out


def _same_devices(a: list[model.Device | None], b: list[model.Device | None]) -> None:
    assert a == b
    for x, y in zip(a, b, strict=True):
        if x is not None and y is not None:
            assert type(x) is type(y)
            assert repr(x) == repr(y)


@compiled_only
@settings(max_examples=500, deadline=None)
@given(_device_lists())
def test_devices_compiled_are_the_reference(raw: list[Any]) -> None:
    reference = [kube._common_device(d) for d in raw]
    _same_devices(kube._COMPILED.read(raw), reference)
    _same_devices(kube._COMPILED.read(raw), reference)  # from what is kept now


@settings(max_examples=300, deadline=None)
@given(_device_lists())
def test_slices_read_fast_are_the_strict_reading(raw: list[Any]) -> None:
    """With either reader, values and messages are those of the strict reader."""
    for compiled in ([False, True] if kube._COMPILED is not None else [False]):
        with pytest.MonkeyPatch.context() as m:
            if not compiled:
                m.setattr(kube, "_COMPILED", None)
            fast = reading.read(raw)
        with pytest.MonkeyPatch.context() as m:
            m.setattr(kube, "_common_devices", lambda raw: [None] * len(raw))
            strict = reading.read(raw)
        assert fast == strict


@compiled_only
def test_devices_built_by_slots_have_every_field() -> None:
    """A device the compiled reader builds is the one model.Device(...) builds."""
    raw = [{"name": "gpu-0", "attributes": {"uuid": {"string": "a"}, "v": {
        "version": "1.2.3"}}, "capacity": {"memory": {"value": "80Gi"}}, "bindsToNode": True}]
    (got,) = kube._common_devices(raw)
    assert got is not None
    want = kube._common_device(raw[0])
    assert want is not None
    for f in model.Device.__dataclass_fields__:
        assert getattr(got, f) == getattr(want, f), f
    assert got.node_name is None and got.all_nodes is False and got.binds_to_node is True


def test_reading_a_slice(reader: str) -> None:
    devices = [{"name": f"gpu-{i}", "attributes": {"uuid": {"string": f"GPU-{i}"}},
                "capacity": {"memory": {"value": "80Gi"}}} for i in range(3)]
    devices.append({"name": "gpu-3", "capacity": {"memory": {"value": "eighty"}}})
    got = reading.read(devices)
    assert isinstance(got, list) and len(got) == 1
    assert got[0].startswith("ResourceSlice s: spec.devices[3].capacity['memory'].value: "
                             "invalid quantity 'eighty'")
    ok = reading.read(devices[:3])
    assert isinstance(ok, model.ResourceSlice)
    assert [d.attributes["uuid"] for d in ok.devices] == ["GPU-0", "GPU-1", "GPU-2"]
    assert ok.devices[0].capacity is ok.devices[2].capacity

