"""The compiled per-call path (`fitcore/_call.pyx`) gives what its Python references in
fitcore.compiled give (`_content_key`, `_walk`, `Problem.results`), on the random and
realistic cases of test_property; and a problem shared between claim contents that walk
to the same key (`Problem.common_or_same`) answers as the claims' own problem would."""

from __future__ import annotations

import copy
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from fitcore import _call, api, cache, compiled, kube, model, testing
from tests.fitcore import builders as b
from tests.fitcore.test_property import EXAMPLES, REALISTIC_EXAMPLES, realistic_case

pytestmark = pytest.mark.skipif(not api.compiled_available(),
                                reason="tests the compiled core; FITCORE_NO_EXTENSIONS is set")


def walked(case: dict[str, Any]) -> None:
    """The compiled content key and walk equal the references on `case`'s claims."""
    inventory = kube.inventory(case["slices"], case["classes"], [])
    claims = [kube.resource_claim(c) for c in case["claims"]]
    node = kube.node(case["node"])
    assert _call.content_key(claims) == compiled._content_key(claims)
    with cache.use(cache.Store()):
        nd = cache.for_slices(inventory.slices).devices_for(node)
        arrays = compiled.NodeArrays.of(nd)
        outcomes = []
        for walk in (compiled._walk, lambda *a: _call.walk(*a, compiled.Unsupported)):
            try:
                outcomes.append(walk(arrays, inventory.classes, claims))
            except compiled.Unsupported as exc:
                outcomes.append(str(exc))
    reference, compiled_walk = outcomes
    assert compiled_walk == reference


@pytest.mark.timeout(900)
@settings(max_examples=min(EXAMPLES, 3000), derandomize=True, database=None, deadline=None,
          suppress_health_check=list(HealthCheck))
@given(seed=st.integers(min_value=0, max_value=2**32 - 1))
def test_compiled_walk_and_key_are_the_references(seed: int) -> None:
    walked(testing.case(seed))


@pytest.mark.timeout(900)
@settings(max_examples=REALISTIC_EXAMPLES, derandomize=True, database=None, deadline=None,
          suppress_health_check=list(HealthCheck))
@given(seed=st.integers(min_value=0, max_value=2**32 - 1))
def test_compiled_walk_and_key_are_the_references_on_realistic_nodes(seed: int) -> None:
    walked(realistic_case(seed))


def test_the_walk_sees_the_common_form_of_most_random_cases() -> None:
    """The comparison above is not vacuous: most random walks give a key."""
    keys = 0
    for seed in range(200):
        case = testing.case(seed)
        inventory = kube.inventory(case["slices"], case["classes"], [])
        claims = [kube.resource_claim(c) for c in case["claims"]]
        with cache.use(cache.Store()):
            nd = cache.for_slices(inventory.slices).devices_for(kube.node(case["node"]))
            try:
                found = compiled._walk(compiled.NodeArrays.of(nd), inventory.classes, claims)
            except compiled.Unsupported:
                continue
        keys += found is not None
    assert keys >= 100, keys


TAINT = {"key": "maintenance", "value": "soon", "effect": "NoSchedule"}


def tolerating(claim: dict[str, Any], key: str) -> dict[str, Any]:
    out = copy.deepcopy(claim)
    for request in out["spec"]["devices"]["requests"]:
        request["exactly"].setdefault("tolerations", []).append(
            {"key": key, "operator": "Exists"})
    return out


def kept_problem(node: model.Node, inventory: model.Inventory,
                 claims: list[model.Claim]) -> object:
    found = api._compile(node, inventory, claims)
    assert isinstance(found, tuple), found
    return found[0]


def test_contents_that_walk_alike_share_one_problem() -> None:
    """Two templates that differ only in a toleration of a taint no device of the node
    has compile to one problem; each still gets its own kept entry and right answer."""
    inventory = kube.inventory([b.rslice("s", b.gpus(4))], [b.gpu_class()], [])
    node = kube.node(b.node())
    claim = b.claim("c", b.req("g", count=2))
    with cache.use(cache.Store()):
        first = [kube.resource_claim(claim)]
        second = [kube.resource_claim(tolerating(claim, "nobody.example.com/x"))]
        assert compiled.content_key(first) != compiled.content_key(second)
        problem = kept_problem(node, inventory, first)
        assert kept_problem(node, inventory, second) is problem
        assert len(cache.for_slices(inventory.slices).devices_for(node).problems) == 2
        fits = [api.allocate(node, inventory, c, engine="c") for c in (first, second)]
        assert fits[0] == fits[1] and fits[0].fits
        assert [r.id.device for r in fits[1].allocations[0]] == ["gpu-0", "gpu-1"]


def test_a_toleration_that_matters_compiles_its_own_problem() -> None:
    """On a node whose devices are tainted, the toleration changes candidacy: the
    templates get problems of their own, and only the tolerating one fits."""
    gpus = [b.device(f"gpu-{i}", taints=[TAINT]) for i in range(2)] + [b.device("gpu-2")]
    inventory = kube.inventory([b.rslice("s", gpus)], [b.gpu_class()], [])
    node = kube.node(b.node())
    claim = b.claim("c", b.req("g", count=2))
    with cache.use(cache.Store()):
        plain = [kube.resource_claim(claim)]
        tolerant = [kube.resource_claim(tolerating(claim, "maintenance"))]
        assert kept_problem(node, inventory, plain) is not kept_problem(node, inventory,
                                                                        tolerant)
        assert api.allocate(node, inventory, plain, engine="c").verdict == "no-fit"
        fit = api.allocate(node, inventory, tolerant, engine="c")
        assert fit.fits and [r.id.device for r in fit.allocations[0]] == ["gpu-0", "gpu-1"]


def test_other_request_names_share_arrays_not_results() -> None:
    """Result names are not part of the walk's key: a template whose request is named
    otherwise gets its own problem over the same packed arrays, and its results carry
    its own name."""
    inventory = kube.inventory([b.rslice("s", b.gpus(2))], [b.gpu_class()], [])
    node = kube.node(b.node())
    with cache.use(cache.Store()):
        one = [kube.resource_claim(b.claim("c", b.req("g")))]
        other = [kube.resource_claim(b.claim("c", b.req("h")))]
        first, second = kept_problem(node, inventory, one), kept_problem(node, inventory, other)
        assert first is not second and first.packed is second.packed  # type: ignore[attr-defined]
        fit = api.allocate(node, inventory, other, engine="c")
        assert [r.request for r in fit.allocations[0]] == ["h"]


def test_compiled_fits_are_the_python_results() -> None:
    """`_call.fits` answers with the results `Problem.results` makes, as a NodeFit."""
    inventory = kube.inventory([b.rslice("s", b.gpus(4))], [b.gpu_class()], [])
    node = kube.node(b.node())
    claims = [kube.resource_claim(b.claim("c", b.req("g", count=3)))]
    with cache.use(cache.Store()):
        first = api.allocate(node, inventory, claims, engine="c")  # makes the results
        problem, state = api._compile(node, inventory, claims)  # type: ignore[misc]
        status, steps, pairs = api._alloc.search(problem.native, state, api.DEFAULT_BUDGET)
        assert status == 1
        fit = _call.fits(problem.made, pairs, node.name, steps)
        assert isinstance(fit, model.NodeFit)
        assert fit == model.NodeFit("fits", node.name, problem.results(pairs), steps=steps,
                                    engine="c") == first
        assert _call.fits([None] * len(problem.made), pairs, node.name, steps) is None
