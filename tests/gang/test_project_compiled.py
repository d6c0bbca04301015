"""The compiled per-node work (`fitcore/_project.pyx`) answers as its Python reference.

`Snapshot.entry` reads a node through `_project.node_parts` (reference:
`snapshot._node_parts`) and `Projection.node_key` runs `_project.node_key` (reference:
`Projection._node_key`). On realistic clusters (tests/gang/realistic.py: unique uuids and
bus ids, random devices and MIG partitions in use, bound pods), for gangs that see the
devices differently (GPUs and a NIC on one PCIe root, GPUs alone, MIG partitions behind
shared counters, `All` of a class), every node must get the same parts, the same class id
and the same canonical device order from both, before and after changes.
"""

from __future__ import annotations

import dataclasses
import gc
import random
from collections.abc import Iterator
from fractions import Fraction
from typing import Any

import pytest

from fitcore import gang, gangtypes, model, projection, snapshot, values, workload
from tests.gang import realistic as rl
from tests.gang.test_projection import Cluster, change

pytestmark = pytest.mark.skipif(snapshot.compiled is None,
                                reason="FITCORE_NO_EXTENSIONS=1: no compiled side to compare")


def _all_template() -> dict[str, Any]:
    """Every H100 GPU of the node (allocation mode All: every pool kept in order)."""
    return {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaimTemplate",
            "metadata": {"name": "all-gpus", "namespace": "team"},
            "spec": {"spec": {"devices": {"requests": [{"name": "gpus", "exactly": {
                "deviceClassName": "gpu", "allocationMode": "All", "selectors": [{"cel": {
                    "expression": f'device.attributes["{rl.GPU}"].productName == "H100"'}}]
            }}]}}}}


TEMPLATES = {"h100-root": rl.template(), "h100-gpus": rl.template("h100-gpus", nic=False),
             "a30-slices": rl.mig_template(), "all-gpus": _all_template()}


def gang_of(template: str, pods: int, cpu: str) -> gang.Gang:
    templates = {("team", n): t for n, t in TEMPLATES.items()}
    return workload.gang_of(rl.workload(pods, template_name=template, cpu=cpu), templates)


def projections(c: Cluster, g: gang.Gang) -> tuple[projection.Projection,
                                                   projection.Projection]:
    """Two projections of the gang over nothing kept: compiled and reference."""
    inv = c.inventory
    made = []
    for _ in range(2):
        made.append(projection.Projection(g, inv._classes, inv._store.selector, {}, {}))
    return made[0], made[1]


def same_node_keys(c: Cluster, g: gang.Gang, compiled: projection.Projection,
                   reference: projection.Projection) -> int:
    """Every node's key and order from both, in the same order (so that interned ids
    are comparable); returns the number of node classes."""
    inv = c.inventory
    snap = inv._current()
    classes = set()
    for e in snap.entries:
        got = compiled.node_key(e, inv._allocated)
        want = reference._node_key(e, inv._allocated)
        assert got == want, e.node.name
        classes.add(got[0])
    assert compiled._intern == reference._intern
    # The compiled side keeps no key per device of a pool without counters (only those
    # the reference's own methods made for it), and what it keeps is the reference's.
    kept = {k: v[1] for k, v in compiled._device_keys.items()}
    assert kept.items() <= {k: v[1] for k, v in reference._device_keys.items()}.items()
    return len(classes)


@pytest.fixture(params=[True, False], ids=["slots", "getattr"])
def device_fields(request: pytest.FixtureRequest) -> Iterator[bool]:
    """The compiled side reading device fields from their slots, then through getattr."""
    snapshot.compiled.read_slots(request.param)
    yield request.param
    snapshot.compiled.read_slots(True)


def test_device_fields_are_read_from_their_slots() -> None:
    """On this CPython the offsets check out at import: the fast path is the one run."""
    assert snapshot.compiled.slots_ok()


@pytest.mark.parametrize("template", sorted(TEMPLATES))
@pytest.mark.parametrize("seed", range(3), ids=lambda s: f"seed={s}")
def test_node_keys_match_reference(template: str, seed: int, device_fields: bool) -> None:
    rng = random.Random(seed)
    nodes = 24
    c = Cluster(rl.cluster(nodes, seed, rack_size=4))
    g = gang_of(template, rng.randint(1, 16), rng.choice(["8", "24", "60"]))
    compiled, reference = projections(c, g)
    classes = same_node_keys(c, g, compiled, reference)
    assert 1 <= classes <= nodes
    # Again with the device parts kept (hits), then after changes (some stale).
    same_node_keys(c, g, compiled, reference)
    change(c, rng, nodes)
    same_node_keys(c, g, compiled, reference)


def test_renamed_roots_share_a_class() -> None:
    """The compiled ranks rename PCIe roots as the reference does: on an idle cluster
    every H100 node of the same NIC layout is one class for the root-aligned gang."""
    c = Cluster(rl.cluster(16, 3, busy=0.0, rack_size=4))
    g = gang_of("h100-root", 4, "8")
    compiled, reference = projections(c, g)
    h100 = [i for i in range(16) if rl.model_of(i, 4) == "H100"]
    assert h100
    same_node_keys(c, g, compiled, reference)
    inv = c.inventory
    snap = inv._current()
    keys = {compiled.node_key(e, inv._allocated)[0] for e in snap.entries
            if int(e.node.name.rpartition("-")[2]) in h100}
    assert len(keys) < len(h100)


def _parts(n: model.Node, used: dict[str, values.Quantity], local: list[Any],
           allocated: dict[Any, Any]) -> tuple[Any, Any]:
    args = (n, used, local, allocated, gangtypes.HOSTNAME_LABEL)
    return snapshot.compiled.node_parts(*args), snapshot._node_parts(*args)


def test_node_parts_match_reference_on_realistic_nodes() -> None:
    c = Cluster(rl.cluster(40, 5))
    change(c, random.Random(5), 40)
    inv = c.inventory
    inv._current()
    for name in inv._names:
        local = [(pk, list(inv._pool_slices[pk].values()))
                 for pk in inv._node_pools.get(name, ())]
        got, want = _parts(inv._nodes[name], inv._used.get(name, {}), local, inv._allocated)
        assert got == want, name
        assert all(a is b for a, b in zip(got[2], want[2], strict=True))
        assert [type(v) for v in got[4].values()] == [type(v) for v in want[4].values()]


def _q(text: str) -> values.Quantity:
    return values.Quantity.parse(text)


@pytest.mark.parametrize(("allocatable", "used"), [
    ({"cpu": "8", "memory": "64Gi"}, {"cpu": "3"}),
    ({"cpu": "3500m"}, {"cpu": "1", "memory": "1Gi"}),  # a fraction; used but not there
    ({"cpu": "2"}, {"cpu": "250m"}),
    ({}, {}),
], ids=["whole", "fraction", "fraction-used", "empty"])
def test_node_parts_free_resources(allocatable: dict[str, str], used: dict[str, str]) -> None:
    node = model.Node("n", {gangtypes.HOSTNAME_LABEL: "n", "zone": "a", "rack": "r1"},
                      (), {k: _q(v) for k, v in allocatable.items()})
    pool = ("gpu.example.com", "n-gpu")
    gpus = tuple(model.Device(f"gpu-{i}") for i in range(3))
    shared = (model.Device("gpu-s", allow_multiple_allocations=True),)
    slices = [model.ResourceSlice("b", *pool, node_name="n", devices=gpus),
              model.ResourceSlice("a", *pool, node_name="n", devices=())]
    for extra, allocated in (((), {}), ((), {pool: [("d", "gpu-1"), ("s", "gpu-2")]}),
                             (shared, {})):
        local = [(pool, [*slices, model.ResourceSlice("c", *pool, node_name="n",
                                                      devices=extra)])]
        got, want = _parts(node, {k: _q(v) for k, v in used.items()}, local, allocated)
        assert got == want
        labels, _, ordered, local_pools, free, pristine = got
        assert labels == (("rack", "r1"), ("zone", "a"))
        assert [s.name for s in ordered] == ["a", "b", "c"]
        assert local_pools == (pool,)
        assert snapshot.device_bound(ordered, local_pools, allocated) == (
            1 << 40 if extra else 3 - (1 if allocated else 0))
        assert pristine == (not allocated)
        for k, v in free.items():
            assert type(v) is Fraction
            expected = (_q(allocatable[k]).value if k in allocatable else Fraction(0)) - (
                _q(used[k]).value if k in used else Fraction(0))
            assert v == expected and hash(v) == hash(expected)


def test_slices_out_of_pool_order_are_grouped_alike() -> None:
    """The compiled side splits a node's slices by pool in one pass when they are listed
    pool by pool (as entries list them), and groups them through a dict when they are
    not: the same keys, orders and interned ids as the reference both ways."""
    c = Cluster(rl.cluster(8, 3, rack_size=4))
    g = gang_of("h100-root", 2, "8")
    compiled, reference = projections(c, g)
    inv = c.inventory
    mixed = 0
    for e in inv._current().entries:
        for local_slices in (e.local_slices, tuple(reversed(e.local_slices))):
            if local_slices is not e.local_slices and len(e.local_pools) < 2:
                continue
            seen = dataclasses.replace(e, local_slices=local_slices)
            got = compiled.node_key(seen, inv._allocated)
            assert got == reference._node_key(seen, inv._allocated), e.node.name
            mixed += local_slices is not e.local_slices
    assert mixed and compiled._intern == reference._intern


def test_kept_tuples_are_not_tracked_by_the_collector() -> None:
    """Most tuples a cold decision keeps hold only atomic values: the compiled side
    leaves them out of the cyclic collector (as the collector would on its first pass);
    a tuple holding a tracked object (a list here) stays tracked. Node entries and their
    free maps are left out too (nothing in them refers back)."""
    c = Cluster(rl.cluster(8, 2, rack_size=4))
    g = gang_of("h100-root", 2, "8")
    compiled, reference = projections(c, g)
    inv = c.inventory
    snap = inv._current()
    for e in snap.entries:
        _, order = compiled.node_key(e, inv._allocated)
        assert order == reference._node_key(e, inv._allocated)[1]
        assert all(not gc.is_tracked(names) for _, names in order)
        part = compiled._parts[e.node.name][2]
        for _, items in part[0]:
            assert not gc.is_tracked(items)
            assert all(not gc.is_tracked(it) for it in items)
    # No key kept per device: only the first device of each capacity/counter content,
    # which the reference's own method keys for the compiled side.
    assert len(compiled._device_keys) <= len(compiled._rests) < len(reference._device_keys)
    parts = snapshot.compiled.node_parts(
        model.Node("n", {"zone": "a"}, (), {"cpu": _q("1")}), {}, [], {}, "h")
    assert parts[0] == (("zone", "a"),) and not gc.is_tracked(parts[0])
    assert gc.is_tracked(parts[1])  # a list
    assert all(not gc.is_tracked(e) and not gc.is_tracked(e.free) for e in snap.entries)


@pytest.mark.parametrize("seed", range(2), ids=lambda s: f"seed={s}")
def test_own_entries_match_reference(seed: int, device_fields: bool,
                                     monkeypatch: pytest.MonkeyPatch) -> None:
    """`Snapshot.entry` of a node that is a class of its own, from parts the inventory
    made at event time: compiled (`_project.own_entry`, slots filled or through the
    constructor) and in Python, the same fields and interned class; the compiled one
    left out of the collector."""
    c = Cluster(rl.cluster(16, seed, rack_size=4))
    inv = c.inventory
    snap = inv._current()
    assert not snap.global_slices
    for i, name in enumerate(inv._names):
        node, local, parts = inv._node_parts[name]
        used = inv._used.get(name, {})
        got = snap.entry(node, used, None, local, own_class=1000 + i, parts=parts)
        with monkeypatch.context() as m:
            m.setattr(snapshot, "compiled", None)
            want = snap.entry(node, used, None, local, own_class=1000 + i, parts=parts)
        assert _fields(got) == _fields(want)
        assert type(got) is snapshot._NodeEntry and not gc.is_tracked(got)
    assert snapshot.compiled.entry_slots_ok() == device_fields
    assert any(not e.pristine for e in snap.entries) and any(e.pristine for e in snap.entries)


def test_insert_all_indexes_as_insert() -> None:
    """`Snapshot.with_entries` indexes a view with `_project.insert_all`: the same label
    groups, cells, class representatives and node lists as inserting entry by entry, on
    a realistic cluster under a gang's projection and on a reordered copy."""
    c = Cluster(rl.cluster(40, 7, rack_size=4))
    g = gang_of("h100-root", 4, "8")
    compiled, _ = projections(c, g)
    inv = c.inventory
    snap = inv._current()
    projected = [inv._project(compiled, e) for e in snap.entries]
    for entries in (projected, projected[::-1], snap.entries):
        got = snap.with_entries(entries)
        want = gang.Snapshot.indexed(snap.inventory, snap.global_slices, snap.owner,
                                     snap._allocated_by_pool, snap.keys)
        for e in entries:
            want.insert(e)
        assert got.entries == want.entries
        assert (got.label_groups, got.group_nodes, got.node_group) == \
            (want.label_groups, want.group_nodes, want.node_group)
        assert (got.cells, got.class_rep, got._group_index, got._own_groups) == \
            (want.cells, want.class_rep, want._group_index, want._own_groups)
        assert len(got.cells) > 1 and len(got.label_groups) > 1


def _fields(e: gang._NodeEntry) -> tuple[Any, ...]:
    return (e.node, e.labels, e.local_pools, e.local_slices, e.sees_global, e.key, e.free,
            e.devices, e.pristine, e.fingerprint, e.order, e.exact, e.ids)


@pytest.mark.parametrize("seed", range(3), ids=lambda s: f"seed={s}")
def test_projected_entries_match_reference(seed: int, device_fields: bool) -> None:
    """`Projection.entries` compiled and its reference: the same entries (fields),
    kept alike (the same kept pairs for unchanged nodes, new ones for changed nodes,
    the kept map emptied past its limit). Entries, nodes and slices read from their
    slots and projected entries made by filling theirs, then all through Python."""
    rng = random.Random(seed)
    nodes = 24
    c = Cluster(rl.cluster(nodes, seed, rack_size=4))
    g = gang_of("h100-root", 8, "8")
    compiled, reference = projections(c, g)
    inv = c.inventory
    kept_c: dict[str, Any] = {}
    kept_r: dict[str, Any] = {}
    for limit in (1000, 1000, 1000, 5):
        snap = inv._current()
        before = dict(kept_c)
        got = snapshot.compiled.project_entries(
            compiled, snap.entries, kept_c, limit, inv._allocated, projection._STATES,
            projection._state, gang._NodeEntry)
        want = reference._entries(snap.entries, kept_r, limit, inv._allocated)
        assert [_fields(e) for e in got] == [_fields(e) for e in want]
        assert snapshot.compiled.entry_slots_ok() == device_fields
        assert kept_c.keys() == kept_r.keys()
        assert len(kept_c) <= limit + 1 or limit > nodes
        for e, p in zip(snap.entries, got, strict=True):
            assert not gc.is_tracked(p)
            if e.node.name not in kept_c:  # emptied past the limit, then refilled
                continue
            assert kept_c[e.node.name] == (e, p)
            assert not gc.is_tracked(kept_c[e.node.name])
            old = before.get(e.node.name)
            if limit > nodes:  # reused exactly while the base entry is the same
                assert (old is not None and old[0] is e) == (old is not None and old[1] is p)
        change(c, rng, nodes)
