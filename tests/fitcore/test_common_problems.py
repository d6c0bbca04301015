"""`compiled.Problem.common` (claims of the common form compiled from the node's kept
bitsets, device classes in `_alloc.device_classes`) builds exactly the arrays the full
path builds (`Problem(reference.prepare(...))`, whose Python `_classes` and `_lists` are
the reference), on the random and realistic cases of test_property. test_property then
checks the answers of the path api.allocate takes against the reference engine."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from fitcore import api, cache, compiled, kube, model, reference, testing
from tests.fitcore import builders as b
from tests.fitcore.test_property import EXAMPLES, REALISTIC_EXAMPLES, realistic_case

pytestmark = pytest.mark.skipif(not api.compiled_available(),
                                reason="tests the compiled core; FITCORE_NO_EXTENSIONS is set")


def both(case: dict[str, Any], store: cache.Store | None = None,
         inventory: model.Inventory | None = None
         ) -> tuple[compiled.Problem | None, object]:
    """The common path's problem (None: not the common form) and what the full path
    gives for the same question on an empty cluster (a Problem, or the exception).
    A fresh store unless `store` (with `inventory`, parsed once) is given."""
    if inventory is None:
        inventory = kube.inventory(case["slices"], case["classes"], [])
    claims = [kube.resource_claim(c) for c in case["claims"]]
    node = kube.node(case["node"])
    with cache.use(store or cache.Store()):
        nd = cache.for_slices(inventory.slices).devices_for(node)
        try:
            common = compiled.Problem.common(node, inventory, claims, nd)
        except compiled.Unsupported as exc:
            common, full = None, exc
        try:
            full = compiled.Problem(reference.prepare(node, inventory, claims))
        except (reference.ClaimError, compiled.Unsupported) as exc:
            full = exc
    return common, full


def assert_same(common: compiled.Problem, full: object, where: str) -> None:
    assert isinstance(full, compiled.Problem), f"{where}: the full path gives {full!r}"
    assert common.header == full.header, where
    assert common.packed == full.packed, where
    assert common.empty_state == full.empty_state, where
    assert common.cap_slots == full.cap_slots, where
    assert (common.n_classes, common.n_values, common.n_cap) == \
        (full.n_classes, full.n_values, full.n_cap), where
    assert [(ci, a.result_name, a.label) for ci, a in common.alts] == \
        [(ci, a.result_name, a.label) for ci, a in full.alts], where
    assert {k: v for k, v in full.takes.items() if full.node.multi[k[1]]} == common.takes
    assert common.prepared.alternatives == full.prepared.alternatives, where


@pytest.mark.timeout(900)
@settings(max_examples=min(EXAMPLES, 3000), derandomize=True, database=None, deadline=None,
          suppress_health_check=list(HealthCheck))
@given(seed=st.integers(min_value=0, max_value=2**32 - 1))
def test_common_path_builds_the_full_paths_arrays(seed: int) -> None:
    common, full = both(testing.case(seed))
    if common is not None:
        assert_same(common, full, f"seed {seed}")


@pytest.mark.timeout(900)
@settings(max_examples=REALISTIC_EXAMPLES, derandomize=True, database=None, deadline=None,
          suppress_health_check=list(HealthCheck))
@given(seed=st.integers(min_value=0, max_value=2**32 - 1))
def test_common_path_builds_the_full_paths_arrays_on_realistic_nodes(seed: int) -> None:
    common, full = both(realistic_case(seed))
    if common is None:
        # Realistic claims are of the common form: only an error (a MIG selector that
        # fails on a whole-GPU node) sends them to the full path.
        assert isinstance(full, reference.ClaimError), f"seed {seed}: {full!r}"
        return
    assert_same(common, full, f"seed {seed}")


def test_random_cases_reach_the_common_path_often() -> None:
    """The comparison above is not vacuous: most random cases take the common path, and
    those that do cover constraints, taints, counters, shared devices and capacity."""
    taken = 0
    seen: set[str] = set()
    for seed in range(400):
        case = testing.case(seed)
        common, _ = both(case)
        if common is None:
            continue
        taken += 1
        text = repr(case)
        seen.update(k for k in ("matchAttribute", "distinctAttribute", "taints",
                                "sharedCounters", "allowMultipleAllocations", "capacity")
                    if k in text)
        seen.update({"firstAvailable"} if "firstAvailable" in text else ())
    assert taken >= 200, taken
    assert seen >= {"matchAttribute", "distinctAttribute", "taints", "sharedCounters",
                    "allowMultipleAllocations", "capacity", "firstAvailable"}, seen


MEM = {"memory": {"value": "40Gi"}}
SHARE = {"memory": {"value": "80Gi", "requestPolicy": {
    "default": "1Gi", "validRange": {"min": "1Gi", "step": "1Gi"}}}}
TAINT = {"key": "maintenance", "value": "soon", "effect": "NoSchedule"}
TOLERATE = [{"key": "maintenance", "operator": "Exists"}]
LAYOUTS: dict[str, list[dict[str, Any]]] = {
    # dedicated devices with capacity: one too small for 60Gi, one with none
    "capacity": [b.rslice("s", [b.device("small", capacity=MEM),
                                b.device("big", capacity={"memory": {"value": "80Gi"}}),
                                b.device("none")])],
    "shared": [b.rslice("s", [b.device(f"gpu-{i}", capacity=SHARE, multi=True)
                              for i in range(3)] + [b.device("plain", multi=True)])],
    "tainted": [b.rslice("s", [b.device("gpu-0", taints=[TAINT]), b.device("gpu-1"),
                               b.device("gpu-2", taints=[TAINT])])],
    "roots": [b.rslice("s", b.gpus(8, roots=4))],
}
HAND = [
    ("capacity", b.claim("c", b.req("g", capacity={"memory": "60Gi"}))),
    ("capacity", b.claim("c", b.req("g", count=2))),
    ("shared", b.claim("c", b.req("g", capacity={"memory": "30Gi"}))),
    ("shared", b.claim("c", b.req("g", count=2), b.req("h"))),
    ("tainted", b.claim("c", b.req("g", count=2))),
    ("tainted", b.claim("c", b.req("g", count=2, tolerations=TOLERATE))),
    ("roots", b.claim("c", b.req("g", count=2), b.req("h", count=2), match=f"{b.GPU}/pcieRoot",
                      match_requests=("g",), distinct=f"{b.GPU}/index")),
    ("roots", b.claim("c", b.first_available("g", ("two", b.exact(count=2)),
                                             ("one", b.exact())), match=f"{b.GPU}/pcieRoot")),
]


@pytest.mark.parametrize("layout, claim", HAND,
                         ids=[f"{layout}-{i}" for i, (layout, _) in enumerate(HAND)])
def test_common_path_on_hand_made_cases(layout: str, claim: dict[str, Any]) -> None:
    case = {"slices": LAYOUTS[layout], "classes": [b.gpu_class()], "claims": [claim],
            "node": b.node()}
    common, full = both(case)
    assert common is not None
    assert_same(common, full, layout)


def test_kept_bitsets_serve_later_questions_exactly() -> None:
    """One node, one store: later questions reuse what earlier ones kept (selector lists,
    capacity outcomes, shared devices' slots, attribute values) and must still build
    the full path's arrays — the same amount on other devices, other amounts on the
    same devices, the same selectors under other requests."""
    pick = f"device.attributes['{b.GPU}'].index <= 1"
    slices = [b.rslice("s", [b.device(f"gpu-{i}", index=i, capacity=SHARE, multi=True)
                             for i in range(3)] + [b.device("plain", index=9, multi=True)])]
    classes = [b.gpu_class()]
    inventory = kube.inventory(slices, classes, [])
    store = cache.Store()
    claims = [
        b.claim("c", b.req("g", capacity={"memory": "30Gi"})),
        b.claim("c", b.req("g", capacity={"memory": "30Gi"}, selectors=(pick,))),
        b.claim("c", b.req("g", capacity={"memory": "30Gi"}, selectors=(pick,)),
                b.req("h", capacity={"memory": "30Gi"})),
        b.claim("c", b.req("h", capacity={"memory": "10Gi"}),
                b.req("g", capacity={"memory": "30Gi"}, selectors=(pick,))),
        b.claim("c", b.req("g", capacity={"memory": "30Gi"}),
                b.req("h", count=2), distinct=f"{b.GPU}/index"),
        b.claim("c", b.req("g", selectors=(pick,)), distinct=f"{b.GPU}/index"),
        b.claim("c", b.req("g", capacity={"memory": "30Gi"})),
    ]
    for i, claim in enumerate(claims):
        case = {"slices": slices, "classes": classes, "claims": [claim], "node": b.node()}
        common, full = both(case, store, inventory)
        assert common is not None, i
        assert_same(common, full, f"question {i}")


@pytest.mark.parametrize("claim, why", [
    (b.claim("c", b.req("g", mode="All")), "allocationMode All"),
    (b.claim("c", b.req("g", "missing")), "a class that does not exist"),
    (b.claim("c", b.req("g", count=33)), "more than a claim may hold"),
    (b.claim("c", b.req("g", selectors=("device.attributes['x'].y == 1",))),
     "a selector that fails on a device"),
], ids=lambda v: v if isinstance(v, str) else "")
def test_other_forms_take_the_full_path(claim: dict[str, Any], why: str) -> None:
    case = {"slices": [b.rslice("s", b.gpus(2))], "classes": [b.gpu_class()],
            "claims": [claim], "node": b.node()}
    common, _ = both(case)
    assert common is None, why


def test_the_common_path_is_what_allocate_compiles() -> None:
    inventory = kube.inventory([b.rslice("s", b.gpus(4))], [b.gpu_class()], [])
    node = kube.node(b.node())
    claims = [kube.resource_claim(b.claim("c", b.req("g", count=2)))]
    fit = api.allocate(node, inventory, claims, engine="c")
    assert fit.fits and fit.engine == "c"
    (kept,) = cache.for_slices(inventory.slices).devices_for(node).problems.values()
    problem = kept[1]
    assert isinstance(problem, compiled.Problem) and problem._unprepared is not None
    assert [r.id.device for r in fit.allocations[0]] == ["gpu-0", "gpu-1"]
