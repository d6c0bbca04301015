"""The compiled core keeps one problem per node and claim content and applies each call's
allocated state to it (fitcore.compiled). These tests pin that mechanism down directly;
test_property compares it with the reference on random cases."""

from __future__ import annotations

import array
from typing import Any

import pytest

from fitcore import _alloc, api, cache, compiled, kube, model
from tests.fitcore import builders as b

pytestmark = pytest.mark.skipif(not api.compiled_available(),
                                reason="tests the compiled core; FITCORE_NO_EXTENSIONS is set")

G = b.GPU


def inventory_with(slices: tuple[model.ResourceSlice, ...], classes: Any,
                   allocated: list[dict[str, Any]]) -> model.Inventory:
    return model.Inventory(slices, classes, kube.inventory([], [], allocated).allocated)


def pod_claim(pod: int, count: int = 1) -> model.Claim:
    """The claim of pod `pod`, made from one template: only the name differs."""
    spec = b.claim(f"worker-{pod}-gpus", b.req("g", count=count))
    return kube.resource_claim(spec)


def test_one_problem_serves_every_pod_of_a_template_as_the_node_fills() -> None:
    base = kube.inventory([b.rslice("s", b.gpus(3))], [b.gpu_class()], [])
    node = kube.node(b.node())
    in_use: list[dict[str, Any]] = []
    taken = []
    for pod in range(3):
        fit = api.allocate(node, inventory_with(base.slices, base.classes, in_use),
                           [pod_claim(pod)], engine="c")
        assert fit.fits, fit
        (result,) = fit.allocations[0]
        taken.append(result.id.device)
        in_use.append(b.allocated(f"worker-{pod}-gpus", (G, "n1", result.id.device)))
    assert taken == ["gpu-0", "gpu-1", "gpu-2"]
    full = api.allocate(node, inventory_with(base.slices, base.classes, in_use),
                        [pod_claim(3)], engine="c")
    assert full.verdict == "no-fit"
    assert any("worker-3-gpus" in reason for reason in full.reasons), full.reasons
    kept = cache.for_slices(base.slices).devices_for(node).problems
    assert len(kept) == 1  # compiled once, for the template's content
    (_, problem), = kept.values()
    assert isinstance(problem, compiled.Problem) and not problem.baked


def test_a_freed_device_is_taken_again() -> None:
    base = kube.inventory([b.rslice("s", b.gpus(2))], [b.gpu_class()], [])
    node = kube.node(b.node())
    both = [b.allocated("x", (G, "n1", "gpu-0")), b.allocated("y", (G, "n1", "gpu-1"))]
    assert api.allocate(node, inventory_with(base.slices, base.classes, both),
                        [pod_claim(0)], engine="c").verdict == "no-fit"
    fit = api.allocate(node, inventory_with(base.slices, base.classes, both[1:]),
                       [pod_claim(1)], engine="c")
    assert [r.id.device for r in fit.allocations[0]] == ["gpu-0"]


def test_counters_and_capacity_follow_the_state() -> None:
    cap = {"memory": {"value": "80Gi", "requestPolicy": {
        "default": "1Gi", "validRange": {"min": "1Gi", "step": "1Gi"}}}}
    slices = [b.rslice("s", [b.device("gpu-0", capacity=cap, multi=True)])]
    base = kube.inventory(slices, [b.gpu_class()], [])
    node = kube.node(b.node())

    def share(n: int) -> model.NodeFit:
        claim = kube.resource_claim(b.claim(f"c{n}", b.req("g", capacity={"memory": "30Gi"})))
        used = [b.allocated(f"x{i}", (G, "n1", "gpu-0"), shares={"memory": "30Gi"})
                for i in range(n)]
        return api.allocate(node, inventory_with(base.slices, base.classes, used), [claim],
                            engine="c")

    assert [share(n).verdict for n in range(4)] == ["fits", "fits", "no-fit", "no-fit"]


def test_a_state_the_kept_problem_cannot_take_is_compiled_with_it() -> None:
    # An All request over a shared device that is already partly used: upstream leaves
    # the device out when the rest of it cannot hold the request, so the kept problem
    # (compiled on an empty cluster, where it can) does not apply.
    cap = {"memory": {"value": "40Gi"}}
    slices = [b.rslice("s", [b.device("gpu-0", capacity=cap, multi=True),
                             b.device("gpu-1", capacity=cap)])]
    base = kube.inventory(slices, [b.gpu_class()], [])
    node = kube.node(b.node())
    spec = b.claim("all", b.req("g", mode="All", capacity={"memory": "30Gi"}))
    empty = api.allocate(node, base, [kube.resource_claim(spec)], engine="c")
    assert sorted(r.id.device for r in empty.allocations[0]) == ["gpu-0", "gpu-1"]
    used = inventory_with(base.slices, base.classes, [
        b.allocated("x", (G, "n1", "gpu-0"), shares={"memory": "20Gi"})])
    ours = api.allocate(node, used, [kube.resource_claim(spec)], engine="c")
    reference = api.allocate(node, used, [kube.resource_claim(spec)], engine="py")
    assert (ours.verdict, ours.allocations) == (reference.verdict, reference.allocations)
    assert [r.id.device for r in ours.allocations[0]] == ["gpu-1"]
    baked = [v for _, v in cache.for_slices(base.slices).compiled.values()]
    assert len(baked) == 1 and isinstance(baked[0], compiled.Problem) and baked[0].baked


def test_search_rejects_a_state_of_the_wrong_size() -> None:
    base = kube.inventory([b.rslice("s", b.gpus(2))], [b.gpu_class()], [])
    node = kube.node(b.node())
    api.allocate(node, base, [pod_claim(0)], engine="c")
    (_, problem), = cache.for_slices(base.slices).devices_for(node).problems.values()
    assert isinstance(problem, compiled.Problem) and problem.native is not None
    with pytest.raises(ValueError, match="state has 1 entries, the problem takes 5"):
        _alloc.search(problem.native, array.array("q", [0]), 100)  # type: ignore[arg-type]


def test_kept_problems_are_bounded_over_all_nodes() -> None:
    store = cache.Store(kept_problems=2)
    base = kube.inventory([b.rslice("s", b.gpus(4))], [b.gpu_class()], [])
    node = kube.node(b.node())
    with cache.use(store):
        for count in (1, 2, 3, 1):
            fit = api.allocate(node, base, [pod_claim(0, count)], engine="c")
            assert len(fit.allocations[0]) == count
        kept = cache.for_slices(base.slices).devices_for(node).problems
    assert len(kept) == 2 and len(store.kept) == 2
    assert cache.current() is not store  # the default store again outside the block
