"""Projected node classes (fitcore.projection) change the cost, never the answer.

On realistic clusters (unique uuids and bus ids, random devices in use, bound pods with
random cpu and memory, MIG-style partitions), `Inventory.fit` must place the gang on
exactly the nodes the naive pod-by-pod simulation picks (first fit in node-name order,
allocator called on every node), and each pod's devices must be a valid allocation on its
node: devices of that node, free, not given twice, matching the claim. The devices may be
other equivalent ones than the allocator's own pick on that node (see fitcore.projection).
The same holds after random changes applied as events.
"""

from __future__ import annotations

import os
import random
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from fitcore import api, gang, inventory, model, projection, semantics, values, workload
from tests.gang import realistic as rl
from tests.gang.test_equivalence import naive

ENGINE = "c" if api.compiled_available() else "py"
TEMPLATES = {"h100-root": rl.template(), "h100-gpus": rl.template("h100-gpus", nic=False),
             "a30-slices": rl.mig_template()}


class Cluster:
    """The objects of a cluster by (kind, name), fed to an Inventory as events."""

    def __init__(self, objects: list[dict[str, Any]]) -> None:
        self.objects: dict[tuple[str, str], dict[str, Any]] = {}
        self.inventory = inventory.Inventory()
        for o in objects:
            self.put(o)

    def put(self, o: dict[str, Any]) -> None:
        key = (o["kind"], o["metadata"]["name"])
        event = "MODIFIED" if key in self.objects else "ADDED"
        self.objects[key] = o
        self.inventory.apply(event, o)

    def delete(self, kind: str, name: str) -> None:
        o = self.objects.pop((kind, name))
        self.inventory.apply("DELETED", o)

    def bundle(self) -> workload.Bundle:
        return workload.load([(o, None) for o in self.objects.values()])


def gang_of(template: str, pods: int, cpu: str) -> gang.Gang:
    templates = {("team", n): t for n, t in TEMPLATES.items()}
    return workload.gang_of(rl.workload(pods, template_name=template, cpu=cpu), templates)


def check_devices(g: gang.Gang, placements: tuple[gang.Placement, ...],
                  bundle: workload.Bundle) -> None:
    """Each pod's devices: on its node, free, not twice, and satisfying its claim."""
    devices: dict[model.DeviceId, tuple[str | None, model.Device]] = {}
    for s in bundle.inventory.slices:
        for d in s.devices:
            devices[model.DeviceId(s.driver, s.pool, d.name)] = (s.node_name, d)
    used = set(bundle.inventory.allocated.dedicated)
    claims = {pc.name: pc.claim for ps in g.pod_sets for pc in ps.claims}
    for p in placements:
        for name, results in p.devices:
            claim = claims[name]
            for r in results:
                node, _ = devices[r.id]
                assert node == p.node, f"{r.id} is not on {p.node}"
                assert r.id not in used, f"{r.id} is in use already"
                used.add(r.id)
            for request in claim.requests:
                mine = [r for r in results if r.request == request.name]
                assert request.exactly is not None
                assert len(mine) == request.exactly.count
                for r in mine:
                    assert semantics.device_selectable(
                        semantics.Selector(), _class(request.exactly.device_class),
                        request.exactly, "", r.id.driver, devices[r.id][1])
            for constraint in claim.constraints:
                attribute = constraint.match_attribute
                assert attribute is not None
                values = {semantics.lookup_attribute(r.id.driver, devices[r.id][1], attribute)
                          for r in results if constraint.covers(r.request, None)}
                assert len(values) == 1, f"{p}: {attribute} differs: {values}"


def _class(name: str) -> model.DeviceClass:
    driver = rl.GPU if name == "gpu" else rl.NIC
    return model.DeviceClass(name, (f'device.driver == "{driver}"',))


def same_as_naive(c: Cluster, g: gang.Gang) -> None:
    bundle = c.bundle()
    expected = naive(g, bundle, ENGINE)
    result = c.inventory.fit(g)
    assert (result.verdict == "fits") == bool(expected), result.reasons
    got = [(p.pod_set, p.index, p.node) for p in result.placements]
    assert got == [(ps, i, n) for ps, i, n, _ in expected]
    check_devices(g, result.placements, bundle)


def change(c: Cluster, rng: random.Random, nodes: int) -> None:
    """Release or reshuffle the devices in use and the pods of a few random nodes."""
    for i in rng.sample(range(nodes), max(1, nodes // 4)):
        name = f"node-{i:05d}"
        if ("ResourceClaim", f"busy-{name}") in c.objects and rng.random() < 0.5:
            c.delete("ResourceClaim", f"busy-{name}")
        fresh = rl.node_objects(random.Random(rng.random()), i, rack_size=4)
        for o in fresh:
            if o["kind"] in ("ResourceClaim", "Pod"):
                c.put(o)


def run(seed: int) -> None:
    rng = random.Random(seed)
    nodes = rng.randint(4, 20)
    c = Cluster(rl.cluster(nodes, seed, rack_size=4))
    template = rng.choice(sorted(TEMPLATES))
    g = gang_of(template, rng.randint(1, 8), rng.choice(["8", "24", "60"]))
    same_as_naive(c, g)
    change(c, rng, nodes)
    same_as_naive(c, g)


@pytest.mark.parametrize("seed", range(8), ids=lambda s: f"seed={s}")
def test_realistic_same_nodes_as_naive(seed: int) -> None:
    run(seed)


EXAMPLES = int(os.environ.get("FITGATE_GANG_EXAMPLES", "40"))


@pytest.mark.timeout(600)
@settings(max_examples=EXAMPLES, derandomize=True, database=None, deadline=None,
          suppress_health_check=list(HealthCheck))
@given(seed=st.integers(min_value=8, max_value=2**32 - 1))
def test_property_realistic_same_nodes_as_naive(seed: int) -> None:
    """More realistic clusters (FITGATE_GANG_EXAMPLES, default 40)."""
    run(seed)


def test_uuids_and_allocation_patterns_do_not_split_classes() -> None:
    """GPUs 3 and 11 in use on one node, 5 and 9 on another (8 per root): one class for a
    pod that wants 8 GPUs and the NIC of one root; unique uuids do not matter either."""
    objects: list[dict[str, Any]] = rl.classes()
    rng = random.Random(3)
    for i, busy in enumerate(([3, 11], [5, 9], [2, 12])):
        node_objects = rl.node_objects(rng, i, busy=0)
        objects += node_objects
        name = f"node-{i:05d}"
        objects.append(rl._claim(f"busy-{name}", [("r", rl.GPU, f"{name}-gpu", f"gpu-{d}")
                                                  for d in busy]))
    c = Cluster(objects)
    g = gang_of("h100-root", 3, "8")
    result = c.inventory.fit(g)
    assert result.verdict != "fits"  # no root has 8 free GPUs
    assert result.stats.classes == 1 and result.stats.allocations == 1
    assert any("node node-00000 (and 2 like it)" in r for r in result.reasons), result.reasons


def test_projection_reads_only_what_selectors_read() -> None:
    from fitcore import reads
    assert reads.attributes('device.attributes["gpu.example.com"].productName == "H100"') \
        == frozenset({"productName"})
    assert reads.attributes('device.attributes["d"]["model"].startsWith("x")') \
        == frozenset({"model"})
    # Anything that uses an attribute map as a value may read any attribute.
    for e in ('device.attributes["d"].exists(k, k == "uuid")',
              '"uuid" in device.attributes["d"]',
              'cel.bind(m, device.attributes["d"], m.uuid == "x")',
              'size(device.attributes["d"]) > 1'):
        assert reads.attributes(e) is None, e


def test_a_selector_on_uuid_keeps_uuids_apart() -> None:
    objects: list[dict[str, Any]] = rl.classes()
    rng = random.Random(5)
    for i in range(3):
        objects += rl.node_objects(rng, i, busy=0)
    c = Cluster(objects)
    first = next(o for o in objects if o["kind"] == "ResourceSlice")
    uuid = first["spec"]["devices"][0]["attributes"]["uuid"]["string"]
    tmpl = rl.template("one-uuid", gpus=1, nic=False)
    tmpl["spec"]["spec"]["devices"]["requests"][0]["exactly"]["selectors"] = [
        {"cel": {"expression": f'device.attributes["{rl.GPU}"].uuid == "{uuid}"'}}]
    g = workload.gang_of(rl.workload(2, template_name="one-uuid", cpu="1"),
                         {("team", "one-uuid"): tmpl})
    result = c.inventory.fit(g)
    assert result.verdict != "fits"
    assert any("holds 1 of its pods" in r for r in result.reasons), result.reasons
    one = workload.gang_of(rl.workload(1, template_name="one-uuid", cpu="1"),
                           {("team", "one-uuid"): tmpl})
    placed = c.inventory.fit(one)
    assert placed.verdict == "fits" and placed.placements[0].node == "node-00000"



@pytest.mark.parametrize("seed", range(4), ids=lambda s: f"seed={s}")
def test_a_patched_view_decides_as_a_fresh_inventory(seed: int) -> None:
    """Small changes patch the gang's kept view (gang.Snapshot.replaced) instead of
    rebuilding it: after each round the decision equals a fresh inventory's."""
    rng = random.Random(500 + seed)
    nodes = 48
    c = Cluster(rl.cluster(nodes, seed, rack_size=8))
    gangs = [gang_of("h100-root", rng.randint(2, 12), "24"),
             workload.gang_of(rl.workload(rng.randint(2, 10), topology=True, cpu="8"),
                              {("team", n): t for n, t in TEMPLATES.items()})]
    for g in gangs:
        c.inventory.fit(g)
    for _ in range(6):
        for i in rng.sample(range(nodes), rng.randint(1, 3)):
            name = f"node-{i:05d}"
            if ("ResourceClaim", f"busy-{name}") in c.objects and rng.random() < 0.3:
                c.delete("ResourceClaim", f"busy-{name}")
                continue
            for o in rl.node_objects(random.Random(rng.random()), i, rack_size=8):
                if o["kind"] in ("ResourceClaim", "Pod"):
                    c.put(o)
        fresh = Cluster(list(c.objects.values()))
        for g in gangs:
            got, want = c.inventory.fit(g), fresh.inventory.fit(g)
            assert got.verdict == want.verdict and got.reasons == want.reasons
            assert [(p.pod_set, p.index, p.node, p.devices) for p in got.placements] == \
                [(p.pod_set, p.index, p.node, p.devices) for p in want.placements]


def _keyed(proj: projection.Projection, devices: list[model.Device]) -> list[int]:
    """The devices' keys under a projection."""
    out = []
    for d in devices:
        observed, relabeled = proj._observed(d)
        out.append(proj._device_key(rl.GPU, d, observed, relabeled)[0])
    return out


def test_device_keys_by_content_not_by_shared_maps() -> None:
    """Device keys are interned per (shared capacity map, counter map, the rest) by
    identity: equal content in other map objects gets the same key, other content
    another, also for devices made and dropped again and again (ids reused)."""
    proj = projection.Projection(gang_of("h100-root", 1, "1"), {"gpu": _class("gpu")},
                                 semantics.Selector(), {}, {})

    def gpu(name: str, memory: str, taints: tuple[model.DeviceTaint, ...] = ()
            ) -> model.Device:
        return model.Device(name, {"productName": "H100", "uuid": f"GPU-{name}"},
                            {"memory": model.DeviceCapacity(values.Quantity.parse(memory))},
                            taints=taints)

    taint = model.DeviceTaint("k", "v", "NoSchedule")
    a, b, c, d = gpu("a", "80Gi"), gpu("b", "80Gi"), gpu("c", "40Gi"), gpu("d", "80Gi", (taint,))
    keys = _keyed(proj, [a, b, c, d, a])
    assert keys[0] == keys[1] == keys[4]
    assert len({keys[0], keys[2], keys[3]}) == 3
    for i in range(200):
        proj._device_keys.clear()  # the devices (and their maps) may go
        memory = "80Gi" if i % 2 else "40Gi"
        got = _keyed(proj, [gpu(f"x{i}", memory), a, c])
        assert got[0] == (got[1] if memory == "80Gi" else got[2])
        assert got[1:] == [keys[0], keys[2]]
