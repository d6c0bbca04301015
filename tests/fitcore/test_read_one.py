"""`read.one` on objects one after another, as `fitgate fit` reads an inventory: into one
Sorted, with the schema model of each kind looked up once; every object still read on
its own (its unknown fields, its version, skipped or not)."""

from __future__ import annotations

import collections
from typing import Any

from fitcore import read


def node(name: str, **extra: Any) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name},
            "status": {"allocatable": {"cpu": "4"}}, **extra}


OBJECTS: list[dict[str, Any]] = [
    node("a"),
    node("b", spex={}),  # the model of Node is known by now: still checked
    {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"}},
    {"apiVersion": "v2", "kind": "Node", "metadata": {"name": "d"}},
    {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "e"}},
    node("f", spex={}),
    {"kind": "Node", "metadata": {"name": "g"}},
    {"apiVersion": "resource.k8s.io/v1beta1", "kind": "ResourceSlise"},
]


def test_one_into_a_sorted_gives_what_a_sorted_per_object_gives() -> None:
    apart = [read.one(o, "f.yaml", names=collections.Counter()) for o in OBJECTS]
    got = None
    names: collections.Counter[str] = collections.Counter()
    for o in OBJECTS:
        got = read.one(o, "f.yaml", names=names, into=got)
    assert got is not None
    assert got.objects == [x for s in apart for x in s.objects]
    assert got.problems == [x for s in apart for x in s.problems]
    assert got.skipped == {"v1 ConfigMap": 2}
    assert [(p.path, p.message.split(" (")[0]) for p in got.problems] == [
        ("spex", "unknown field 'spex'"),
        ("apiVersion", "Node is read in v1, not v2"),
        ("spex", "unknown field 'spex'"),
        ("apiVersion", "required field is missing"),
        ("kind", "unknown kind 'ResourceSlise' in resource.k8s.io/v1beta1; fitgate reads "
                 "DeviceClass, DeviceTaintRule, ResourceClaim, ResourceClaimTemplate, "
                 "ResourceSlice there")]
    lenient = read.one(node("h", spex={}), "f.yaml", lenient=True)
    assert not lenient.problems and "spex: unknown field 'spex' (ignored" in lenient.warnings[0]

